"""Pack whole episodes into fixed-length rows (first-fit-decreasing) with per-episode position ids.

Shape legend: B = rows in a micro-batch, T = tokens per row (the longest row of the micro-batch),
S = segments (episodes) in a micro-batch.

Each episode of length L contributes L input positions. Position ``p`` of an episode carries the
*target* token ``p + 1`` and that target's fields (loss mask, behaviour log-prob, advantage, weight):
the shift is done per episode, before packing, so that the last token of one episode never predicts
the first token of the next (its mask is 0). Padding has segment id -1 and mask 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

PAD_SEGMENT = -1


@dataclass
class Sequence:
    """One episode in token space, as the packer sees it."""

    ids: list[int]
    fields: dict[str, list[float]] = field(default_factory=dict)
    """Per-token values aligned with ``ids`` (value at index i belongs to token i)."""


@dataclass
class PackedBatch:
    input_ids_BT: torch.Tensor
    position_ids_BT: torch.Tensor
    segment_ids_BT: torch.Tensor
    """Index of the episode (within this batch) each position belongs to; -1 for padding."""
    target_ids_BT: torch.Tensor
    fields_BT: dict[str, torch.Tensor]
    seq_lens: list[list[int]]
    """Episode lengths in each row, in order (for flash-attention ``cu_seqlens``)."""
    seq_index: list[list[int]]
    """Which input sequence each segment of each row is."""

    @property
    def num_tokens(self) -> int:
        return int((self.segment_ids_BT >= 0).sum())

    @property
    def efficiency(self) -> float:
        """Share of non-padding positions."""
        return self.num_tokens / max(1, self.segment_ids_BT.numel())


def first_fit_decreasing(lengths: list[int], row_len: int) -> list[list[int]]:
    """Bin-pack sequence indices into rows of capacity ``row_len``, longest first.

    Raises:
        ValueError: a sequence longer than a row (raise ``optim.row_tokens`` or lower ``env.max_context``).
    """
    rows: list[list[int]] = []
    free: list[int] = []
    for idx in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        n = lengths[idx]
        if n > row_len:
            raise ValueError(f"sequence of {n} tokens does not fit a row of {row_len}")
        for r, space in enumerate(free):
            if n <= space:
                rows[r].append(idx)
                free[r] -= n
                break
        else:
            rows.append([idx])
            free.append(row_len - n)
    return rows


def one_per_row(lengths: list[int]) -> list[list[int]]:
    """The padded baseline: every sequence alone in its row."""
    return [[i] for i in range(len(lengths))]


def collate(sequences: list[Sequence], rows: list[list[int]], pad_id: int = 0) -> PackedBatch:
    """Build tensors for ``rows`` (lists of indices into ``sequences``), padded to the longest row."""
    field_names = sorted(sequences[rows[0][0]].fields) if rows and rows[0] else []
    width = max(sum(len(sequences[i].ids) for i in row) for row in rows)
    num_B = len(rows)
    input_ids_BT = torch.full((num_B, width), pad_id, dtype=torch.long)
    target_ids_BT = torch.full((num_B, width), pad_id, dtype=torch.long)
    position_ids_BT = torch.zeros((num_B, width), dtype=torch.long)
    segment_ids_BT = torch.full((num_B, width), PAD_SEGMENT, dtype=torch.long)
    fields_BT = {name: torch.zeros((num_B, width), dtype=torch.float64) for name in field_names}
    seq_lens: list[list[int]] = []
    seg = 0
    for b, row in enumerate(rows):
        start = 0
        seq_lens.append([])
        for i in row:
            seq = sequences[i]
            n = len(seq.ids)
            ids_T = torch.tensor(seq.ids, dtype=torch.long)
            input_ids_BT[b, start : start + n] = ids_T
            target_ids_BT[b, start : start + n - 1] = ids_T[1:]
            position_ids_BT[b, start : start + n] = torch.arange(n)
            segment_ids_BT[b, start : start + n] = seg
            for name in field_names:
                # Shift: position p holds the fields of target token p + 1; the last position gets 0.
                values_T = torch.tensor(seq.fields[name][1:], dtype=torch.float64)
                fields_BT[name][b, start : start + n - 1] = values_T
            start += n
            seg += 1
            seq_lens[-1].append(n)
        # Padding positions continue the row's last episode (their outputs are unused). Restarting them at
        # 0 would make transformers read the padding as another packed sequence and build a [T, T] mask,
        # losing SDPA's fused causal kernel on rows that hold one episode.
        last = seq_lens[-1][-1] if seq_lens[-1] else 0
        position_ids_BT[b, start:] = torch.arange(last, last + width - start)
    return PackedBatch(
        input_ids_BT, position_ids_BT, segment_ids_BT, target_ids_BT, fields_BT, seq_lens, [list(r) for r in rows]
    )


def split_rows(rows: list[list[int]], rows_per_micro_batch: int) -> list[list[list[int]]]:
    return [rows[i : i + rows_per_micro_batch] for i in range(0, len(rows), rows_per_micro_batch)]
