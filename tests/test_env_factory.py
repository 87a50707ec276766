"""The one env factory (sopgym.episodes.factory.EnvFactory): which kwargs each env is made with, and
that it travels (plain pickle, as to a Ray env worker) without changing them."""

import pickle

from sopgym.episodes.factory import EnvFactory

WR = "sopgym/WarehouseReceiving-v0"


def test_namespace_kwargs_go_only_to_the_envs_of_their_namespace_and_the_split_overrides_all():
    make = EnvFactory({"max_turns": 8, "split": "train"}, namespace_kwargs={"sopbench": {"prompt_style": "upstream"}},
                      split="test")
    assert [make.kwargs_for(e) for e in (WR, "sopbench/Patient-v0", "sopgym:sopbench/Patient-v0", "sopbenchX/Y-v0")] == [
        {"max_turns": 8, "split": "test"},
        {"max_turns": 8, "split": "test", "prompt_style": "upstream"},
        {"max_turns": 8, "split": "test", "prompt_style": "upstream"},
        {"max_turns": 8, "split": "test"},
    ]


def test_a_factory_copies_its_kwargs_when_made():
    kwargs = {"max_turns": 8}
    make = EnvFactory(kwargs)
    kwargs["max_turns"] = 2
    assert make.kwargs_for(WR) == {"max_turns": 8}


def test_a_pickled_factory_makes_the_env_the_original_makes():
    make = EnvFactory({"max_turns": 3}, split="val")
    envs = [make(WR), pickle.loads(pickle.dumps(make))(WR)]
    try:
        assert [(e.spec.id, e.spec.kwargs["max_turns"], e.spec.kwargs["split"]) for e in envs] == [(WR, 3, "val")] * 2
        assert envs[0].reset(seed=0)[0] == envs[1].reset(seed=0)[0]
    finally:
        for env in envs:
            env.close()
