"""The honest text spaces."""


from sopgym.envs.spaces import AssistantAction, UnicodeText


def test_contains_any_unicode_up_to_max_length():
    space = UnicodeText(10)
    assert space.contains('{"a": "é中😀"}'[:10])
    assert not space.contains("x" * 11)
    assert not space.contains(b"bytes")


def test_samples_are_members_and_seeded():
    a, b = UnicodeText(100, seed=3), UnicodeText(100, seed=3)
    samples = [a.sample() for _ in range(50)]
    assert samples == [b.sample() for _ in range(50)]
    assert all(a.contains(s) for s in samples)
    assert any(ord(c) > 127 for s in samples for c in s)


def test_assistant_action_contains_message_dicts():
    space = AssistantAction(100)
    assert space.contains({"role": "assistant", "content": None, "tool_calls": []})
    assert not space.contains({"role": "user", "content": "x"})
    assert isinstance(space.sample(), str)
    assert space == AssistantAction(100) and space != UnicodeText(100)
