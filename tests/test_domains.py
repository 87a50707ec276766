"""The quality bar of every authored domain pack (issue 4, "The domains").

Parametrised over every registered authored pack (``all_packs("sopgym")``), so a domain added
later is checked without editing this file, except for one line: its pinned test-split hash in
``PINNED_TEST_SPLIT_HASHES`` (the hash test says what to add).

How labels are verified: the reference solver is written from the SOP text, independently of the
generator's labelling code, and acts through the env like any policy. If it reaches every label
(and every expected final state) on every split, generator, tools and solver agree.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path

import gymnasium as gym
import pytest

import sopgym  # noqa: F401  (registers the envs)
from sopgym.authoring.quality import check_difficulty_label
from sopgym.envs.policies import make_policy
from sopgym.sop_tasks.pack import DIFFICULTIES, DomainPack, content_hash
from sopgym.sop_tasks.registry import all_packs, get_pack

PACKS: list[DomainPack] = sorted(all_packs("sopgym"), key=lambda p: p.name)
NAMES = [p.name for p in PACKS]

#: sha256 of each domain's 200-task test split (``pack.split_hash("test")``). A change of a pinned
#: hash means the generator changed: bump the pack's version and update the hash on purpose. The one
#: exception is a change of the difficulty alone (bookkeeping no agent sees, so the env version
#: stays): then ``PINNED_DIFFICULTY_FREE_HASHES`` must not change.
PINNED_TEST_SPLIT_HASHES = {
    "BusinessVerificationKYB": "2700fb72d411ea70869a4ada820369c93677e5fb052bf73eab06c56ae90bb6de",
    "OrderFulfilment": "3af8cbc59b26773b56bfbb06ceeb4abe0815625015b0cab030372b54b6f3b345",
    "SellerEmailTriage": "1efff2408bb97dc99a6a9b90b2bb9779c989acf365d518dc73e8c5aae73d8c46",
    "CustomerServiceTroubleshooting": "d8144acf73806eab9d12405935664eeaf35d1c067f1bbbc9889121596bea8bcc",
    "ReferralAbuseEnforcement": "5005a80337a80fec05b03d079c21f38b5184a20599764e1cb70b11dd3a8ac41d",
    "AircraftPreflightInspection": "55860ab1a050d0e56dff38e42fec38d51e76de8cf52b111020134788f82bd34e",
    "ContentModeration": "c0db8f0808b069466f327dea11ea784927db5846c90bff088a8be10229832dcb",
    "DangerousGoodsClassification": "ae807ab5fcc5691ca1450b0b031a09a7eaf631a67a6f0c06f9086d142898f0b7",
    "WarehouseReceiving": "0af252c1e8d179b992127470bbf886d29f06bf5cc0c392d2f3279a0ab6f455c0",
    "PatientIntake": "f5a29b124a4d50ee5ac6e989a3ca470cee96723b853c7b5e759a5eecd59a6344",
    "AdTrafficSpoofing": "aab1cfbebf62fed1d06e41e6d31a4abef86c26dae75348ca46a83180c18cff74",
    "DrivingVideoAnnotationQC": "1661d8472a4a900eb9a273c2a1fba67b292ade6df29920fa91e411358d7c2bb8",
}

#: sha256 of each domain's tasks with their ``difficulty`` left out (``_difficulty_free_hash``): val, test
#: and the first ``NUM_TRAIN_CHECKED`` train tasks. Everything an agent is shown and scored on (inputs,
#: answers, replay records, initial and expected state, meta) is in them, and the difficulty, which is
#: bookkeeping, is not: a generator whose difficulty rule changes keeps these hashes (and its env version),
#: one whose tasks change does not. Pinned before the difficulty of 8 domains was recomputed from
#: label-independent features, which left them as they were.
PINNED_DIFFICULTY_FREE_HASHES = {
    "AdTrafficSpoofing": {
        "val": "5001355c9845f29fb2d29a80023269ede1ef1edd99f578f98ff2fcba508da67a",
        "test": "5f38c19bff06cf0d9913ce7c97b73c41262c6c59aae8e45b6c6e1f3333323d27",
        "train": "d05ce3da3b52630202acc014de2c6ac99fba33778ce0a4560bcd4e04248a5981",
    },
    "AircraftPreflightInspection": {
        "val": "1f6b92c42e8f9ab3f489913184c220f20ceecf3239ec0f700252b2163676ae66",
        "test": "051f387bef46f597a69b4c7ccb9e0b9846c2558ffcd2a31c06b98049fdd16484",
        "train": "3363b81bbab2c3690b2e94ad0b7aaaea27b7dc25663adddf247bb9433b2cf648",
    },
    "BusinessVerificationKYB": {
        "val": "6c5cd71ad78c63f17d8685a6fd2beda5a9c15bc5666e1325eab098c299307c73",
        "test": "db4f747499f6e3ab6433ad1cad87f8ab1ba7c4dd32ccbb5d422caa419e427644",
        "train": "d6f686d28a4bbbae7097e3d1b1d9cfa53d9fb4ec74f11cb2e2580aa4cb50d0d0",
    },
    "ContentModeration": {
        "val": "74bbd39b46d652a6688b9874e1ab791b73daab6d5ed68b4086c8fcf1d9f26297",
        "test": "f6c0c1c0f5f85763f690817999b535cc382699f0c2a937dd9f1101765a1f8763",
        "train": "a494646d2367f7ab85deb3a032ec59c7ca697bf262434c7caa967ad56be54492",
    },
    "CustomerServiceTroubleshooting": {
        "val": "eccdc4ea9059b6fa5b84d736e3631a6c492b73486fc607f7f10a50d4dd0eaab4",
        "test": "d722146cf1cd26dcf2b6dc836f666a78c780c674113b2a6cf56aafc89d06f269",
        "train": "ec2d40d2556bfff66dbaa955c2576a189d8f6c0b6cd54612162632f94c64faa0",
    },
    "DangerousGoodsClassification": {
        "val": "2b0377b8d02be2be4c6ca2a6dff58c640688fd035ca37ec8b13d1b6b7ae1e956",
        "test": "957b665e22d817ddf65423141ed342714c1c80253ab1ff8a0a7d6ff509972462",
        "train": "9090e988dc239a76fe95fa5373ead8e6be02511f7b8e9743d600ca2da852553a",
    },
    "DrivingVideoAnnotationQC": {
        "val": "c93345dfc0d206dc384b35dc61f79688d0ce14306b5392a6a9ddb7d0aeaa4641",
        "test": "9dfe821384c23c32b3afccba3f3c7380f96868d992440cdb3274d8132c551742",
        "train": "e5c3403b8436e17d699d11f808afd2f359fbfd2bd47a0c82835fc4afba88d805",
    },
    "OrderFulfilment": {
        "val": "37d00df4862354a59787f2bc5df82416889e448bec3d8b2ab5650958be7392df",
        "test": "fb16d5b2c51812e5b05bb0f60a435b8864b4ba739b61b50d2ad38578eeaab653",
        "train": "03b6f7b1ab07cb600bffebdf40808411558760e9f654f19ee603ddc25076ccc5",
    },
    "PatientIntake": {
        "val": "ed079f237afc66bc3bb95d1ca714d1daa2dad03781c9437ffd9578f07c824391",
        "test": "08fcc5c15f175f7ff6b48d57ea6971679be421f3a6f4535a8fb75b83a1db9aed",
        "train": "1568ed0ea0d2dad57ccfa27303d598511a5778f44f11f872bb533242d4eefc75",
    },
    "ReferralAbuseEnforcement": {
        "val": "03fb79d5f4ecaeaf17110ad7d271adbd42aa1742f166ef57e52b8698f212b85c",
        "test": "065f75af023964d643d8305b57c62febbdd18bef998fc6e85d770440e0b87731",
        "train": "596ddd07f6425e89d2433736fc346523669c93139eb8b9e60251510592dd7f09",
    },
    "SellerEmailTriage": {
        "val": "565edfa7debda4cf1d54519eba4e907f61143dea40491c274b09026decfb7b6a",
        "test": "87b1f20b56d9c138319ea763217e95ba7d34d6f41c0460169e4967224c1c4439",
        "train": "c578b413bbdd2148c35f4d027199d252a1efb8ab4138cfe135afe53888671a26",
    },
    "WarehouseReceiving": {
        "val": "2a3b5fbd4a32bae158268145b76d60b7dc2064620d56fb2399317fffd429d1ff",
        "test": "13956ca7efbd515073d7f19e752caa6ff8861e742b217e2d4cda72e95b068691",
        "train": "d195e565ecc4748d349f2cbef88b6ccb2abe077f713e692df8bc1d17f28908f2",
    },
}

NUM_TRAIN_CHECKED = 200
MIN_SOP_CHARS, MAX_SOP_CHARS = 2_500, 12_000
MIN_TOOLS, MAX_TOOLS = 5, 25
MIN_MEAN_TOOL_CALLS = 4
#: Majority (most common train answer, no tools) must stay at or below this task success rate.
MAX_MAJORITY_SUCCESS = 0.5


@cache
def _oracle_episodes(name: str, split: str, count: int) -> tuple[dict, ...]:
    """Episode records of the oracle on the first ``count`` tasks of a split, through gymnasium.make."""
    pack = get_pack(name)
    env = gym.make(pack.env_id, reward="binary")
    policy = make_policy("oracle")
    episodes = []
    try:
        for index in range(count):
            obs, info = env.reset(options={"split": split, "task_index": index})
            policy.reset(info)
            names = []
            while True:
                obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
                names += [c["name"] for c in info["calls"]]
                if terminated or truncated:
                    break
            episodes.append(dict(info["episode"], called=names))
    finally:
        env.close()
    return tuple(episodes)


def _split_size(pack: DomainPack, split: str) -> int:
    return pack.num_tasks(split) or NUM_TRAIN_CHECKED


def _failures(episodes) -> list[str]:
    return [
        f"{e['task_id']}: answer {e['answer']} expected {e['expected']}, components {e['reward_components']}, "
        f"truncation {e['truncation_cause']}"
        for e in episodes
        if e["reward"] != 1.0
    ]


def _eval_episodes(name: str) -> tuple[dict, ...]:
    pack = get_pack(name)
    return _oracle_episodes(name, "val", _split_size(pack, "val")) + _oracle_episodes(
        name, "test", _split_size(pack, "test")
    )


# -- labels are right: the oracle solves everything --------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("split", ["val", "test", "train"])
def test_oracle_solves_every_task_of_split(name, split):
    pack = get_pack(name)
    count = min(_split_size(pack, split), NUM_TRAIN_CHECKED) if split == "train" else _split_size(pack, split)
    failures = _failures(_oracle_episodes(name, split, count))
    assert not failures, (
        f"{name}/{split}: oracle failed {len(failures)} of {count} tasks (expected 0); first: {failures[0]}"
    )


@pytest.mark.parametrize("name", NAMES)
def test_oracle_makes_at_least_four_tool_calls_on_average(name):
    episodes = _eval_episodes(name)
    mean = sum(e["num_tool_calls"] for e in episodes) / len(episodes)
    assert mean >= MIN_MEAN_TOOL_CALLS, f"{name}: oracle mean tool calls {mean:.2f}, expected >= {MIN_MEAN_TOOL_CALLS}"


@pytest.mark.parametrize("name", NAMES)
def test_oracle_uses_every_non_distractor_tool(name):
    pack = get_pack(name)
    used = {n for e in _eval_episodes(name) for n in e["called"]}
    needed = {t.name for t in pack.tools if not t.distractor}
    assert needed <= used, f"{name}: non-distractor tools never used by the oracle on val+test: {sorted(needed - used)}"


@pytest.mark.parametrize("name", NAMES)
def test_oracle_never_calls_a_distractor(name):
    pack = get_pack(name)
    distractors = {t.name for t in pack.tools if t.distractor}
    used = {n for e in _eval_episodes(name) for n in e["called"]}
    assert not used & distractors, f"{name}: the oracle called distractor tools {sorted(used & distractors)}"


@pytest.mark.parametrize("name", NAMES)
def test_majority_policy_is_far_below_oracle(name):
    pack = get_pack(name)
    env = gym.make(pack.env_id, reward="binary")
    policy = make_policy("majority")
    count = _split_size(pack, "test")
    successes = 0
    try:
        for index in range(count):
            obs, info = env.reset(options={"split": "test", "task_index": index})
            policy.reset(info)
            _, reward, _, _, _ = env.step(policy.act(obs, info))
            successes += reward == 1.0
    finally:
        env.close()
    rate = successes / count
    assert rate <= MAX_MAJORITY_SUCCESS, (
        f"{name}: majority policy success {rate:.2f} on test, expected <= {MAX_MAJORITY_SUCCESS}"
    )


# -- generation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_generator_is_deterministic_within_a_process(name):
    pack = get_pack(name)
    for split, index in (("train", 0), ("train", 12345), ("val", 3), ("test", 199)):
        first = json.dumps(pack.task(split, index).to_json(), sort_keys=True)
        again = json.dumps(pack.task(split, index).to_json(), sort_keys=True)
        assert first == again, f"{name}: task {split}/{index} differs between two generations"


_HASH_SCRIPT = """
import json, sopgym
from sopgym.sop_tasks.registry import all_packs
hashes = {}
for pack in all_packs("sopgym"):
    try:
        hashes[pack.name] = pack.split_hash("test", n=25)
    except Exception as exc:  # one broken pack must not hide the others' results
        hashes[pack.name] = f"generation failed: {type(exc).__name__}: {exc}"
print(json.dumps(hashes))
"""


@cache
def _hashes_in_subprocess(hash_seed: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    out = subprocess.run(
        [sys.executable, "-c", _HASH_SCRIPT], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", NAMES)
def test_generator_is_deterministic_across_processes_and_hash_seeds(name):
    here = get_pack(name).split_hash("test", n=25)
    for seed in ("1", "2"):
        there = _hashes_in_subprocess(seed)[name]
        assert there == here, (
            f"{name}: first 25 test tasks differ under PYTHONHASHSEED={seed} (set or hash order leaks into generation)"
        )


@pytest.mark.parametrize("name", NAMES)
def test_test_split_hash_is_pinned(name):
    got = get_pack(name).split_hash("test")
    if name not in PINNED_TEST_SPLIT_HASHES:
        pytest.fail(
            f"{name}: no pinned test-split hash. A new domain must pin its test split: add "
            f'"{name}": "{got}" to PINNED_TEST_SPLIT_HASHES in tests/test_domains.py'
        )
    want = PINNED_TEST_SPLIT_HASHES[name]
    assert got == want, (
        f"{name}: test split hash changed: expected {want}, got {got}. If the generator change is intended, "
        f"bump the pack's version and update PINNED_TEST_SPLIT_HASHES (a change of the difficulty alone keeps "
        f"the version and PINNED_DIFFICULTY_FREE_HASHES)"
    )


def _difficulty_free_hash(pack: DomainPack, split: str, count: int) -> str:
    """sha256 of the canonical JSON of tasks ``0..count-1`` of ``split``, each without its difficulty."""
    tasks = [pack.task(split, i).to_json() for i in range(count)]
    return content_hash([{k: v for k, v in t.items() if k != "difficulty"} for t in tasks])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("split", ["val", "test", "train"])
def test_tasks_without_their_difficulty_are_pinned(name, split):
    pack = get_pack(name)
    got = _difficulty_free_hash(pack, split, _split_size(pack, split))  # train: the first NUM_TRAIN_CHECKED
    if name not in PINNED_DIFFICULTY_FREE_HASHES:
        pytest.fail(f'{name}: no pinned difficulty-free hashes. A new domain must pin them: add "{name}": '
                    f'{{"val": ..., "test": ..., "train": ...}} (this test prints each) to PINNED_DIFFICULTY_FREE_HASHES; '
                    f"{split}: {got}")
    want = PINNED_DIFFICULTY_FREE_HASHES[name][split]
    assert got == want, (
        f"{name}: {split} tasks (difficulty left out) changed: expected {want}, got {got}. Inputs, answers, records, "
        f"states or meta changed: bump the pack's version and update PINNED_DIFFICULTY_FREE_HASHES"
    )


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("split", ["val", "test"])
def test_primary_label_is_balanced(name, split):
    pack = get_pack(name)
    primary = pack.output_fields[0]
    labels = [json.dumps(pack.task(split, i).answer[primary.name]) for i in range(_split_size(pack, split))]
    num_labels = len(primary.enum) if primary.enum is not None else len(set(labels))
    limit = 0.40 if num_labels > 2 else 0.60
    value, count = Counter(labels).most_common(1)[0]
    share = count / len(labels)
    assert share <= limit, f"{name}/{split}: label {primary.name}={value} has share {share:.2f}, expected <= {limit}"


@pytest.mark.parametrize("name", NAMES)
def test_every_difficulty_occurs_in_test_split(name):
    pack = get_pack(name)
    seen = Counter(pack.task("test", i).difficulty for i in range(_split_size(pack, "test")))
    assert set(seen) == set(DIFFICULTIES), (
        f"{name}: difficulties in test split {dict(seen)}, expected all of {DIFFICULTIES}"
    )


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("split", ["val", "test"])
def test_difficulty_does_not_predict_the_primary_label(name, split):
    """``sopgym validate-domain``'s ``difficulty_label`` check (issue 12), run here on its own: it needs
    the tasks alone, not the oracle's episodes."""
    pack = get_pack(name)
    check, _ = check_difficulty_label(pack, {split: _split_size(pack, split)})
    assert check.ok, f"{name}/{split}: {check.detail}"


# -- static shape ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_sop_length_is_within_bounds(name):
    size = len(get_pack(name).sop)
    assert MIN_SOP_CHARS <= size <= MAX_SOP_CHARS, (
        f"{name}: SOP has {size} characters, expected {MIN_SOP_CHARS}-{MAX_SOP_CHARS}"
    )


@pytest.mark.parametrize("name", NAMES)
def test_sop_has_numbered_steps(name):
    numbers = [int(m) for m in re.findall(r"(?m)^\s*(\d+)\.\s+\S", get_pack(name).sop)]
    assert all(n in numbers for n in range(1, 6)), (
        f"{name}: SOP numbered steps {numbers}, expected at least steps 1 to 5"
    )


@pytest.mark.parametrize("name", NAMES)
def test_tool_count_is_within_bounds(name):
    count = len(get_pack(name).tools)
    assert MIN_TOOLS <= count <= MAX_TOOLS, f"{name}: {count} tools, expected {MIN_TOOLS}-{MAX_TOOLS}"


@pytest.mark.parametrize("name", NAMES)
def test_has_a_distractor_tool(name):
    distractors = [t.name for t in get_pack(name).tools if t.distractor]
    assert distractors, f"{name}: no tool is marked distractor=True, expected at least one"


# -- one layout (docs/adding_a_domain.md) ----------------------------------------------------------
LAYOUT = {"__init__.py", "tools.py", "generator.py", "solver.py", "sop.md"}


def _pack_folder(pack: DomainPack) -> tuple[str, Path]:
    package = pack.generate.__module__.rsplit(".", 1)[0]
    return package, Path(importlib.util.find_spec(package).origin).parent


def _imported_modules(path: Path, package: str) -> set[str]:
    """Absolute names of the modules a file imports (relative imports resolved against ``package``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(x for x in (base, node.module) if x)
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("name", NAMES)
def test_pack_folder_has_the_one_layout(name):
    pack = get_pack(name)
    _, folder = _pack_folder(pack)
    files = {p.name for p in folder.iterdir() if p.suffix in (".py", ".md")}
    expected = LAYOUT | ({"state.py"} if pack.program is not None else set())
    assert files == expected, f"{name}: files {sorted(files)} in {folder.name}/, expected {sorted(expected)}"


@pytest.mark.parametrize("name", NAMES)
def test_pack_init_holds_only_imports_and_the_pack(name):
    _, folder = _pack_folder(get_pack(name))
    body = ast.parse((folder / "__init__.py").read_text(encoding="utf-8")).body
    kinds = [type(node).__name__ for node in body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    targets = [t.id for node in body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)]
    assert set(kinds) <= {"Import", "ImportFrom", "Assign"} and targets == ["PACK"], (
        f"{name}: __init__.py holds {kinds} assigning {targets}, expected imports and one assignment to PACK"
    )


@pytest.mark.parametrize("name", NAMES)
def test_solver_never_imports_the_generator(name):
    package, folder = _pack_folder(get_pack(name))
    imported = _imported_modules(folder / "solver.py", package)
    assert not {m for m in imported if m.startswith(f"{package}.generator")}, (
        f"{name}: solver.py imports {sorted(imported)}; the reference solver must not use the generator's labelling code"
    )


@pytest.mark.parametrize("name", NAMES)
def test_tools_and_records_are_written_with_the_pack_helpers(name):
    """No hand-built ToolSpec or JSON Schema object in tools.py, no hand-built replay key in generator.py."""
    _, folder = _pack_folder(get_pack(name))
    by_hand = {
        "tools.py": ("ToolSpec(", '"type": "object"', "Tier."),
        "generator.py": ("canonical_args", "ERROR_KEY"),
    }
    found = [(f, s) for f, needles in by_hand.items() for s in needles if s in (folder / f).read_text(encoding="utf-8")]
    assert not found, f"{name}: written by hand instead of with sop_tasks.toolkit/generation: {found}"
