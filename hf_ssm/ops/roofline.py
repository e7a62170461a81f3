"""Roofline model of the Triton scans: every launch of a forward and a backward pass, its memory traffic counted from
the kernel's own loads and stores, its arithmetic, and the times an H100 or H200 allows (docs/design.md §9).

    python -m hf_ssm.ops.roofline                                  # the acceptance shape of bench_kernels.py
    python -m hf_ssm.ops.roofline --json r.json --markdown r.md    # also as JSON / markdown tables
    python -m hf_ssm.ops.roofline --batch 2 --steps 37 --heads 2 --state 5 --blocks 3 --dict_size 3 --chunk 16

Traffic of a Triton launch is its grid times what one program loads and stores, lane by lane as the kernel's
tl.load / tl.store masks allow (masked-off lanes move nothing; a complex value is two 4-byte loads; an atomic add
reads and writes its element): loads repeated across programs (the dictionary column every time block of the P
generation re-reads, the chunk boundaries every program reads) count each time, so these are the bytes the kernels
ask of the memory system, which the L2 may serve in part. The same counts, taken by an instrumented Triton
interpreter, are checked against this model in tests/ops/test_roofline.py. The torch operations between the
kernels (dtype conversions, the P-generation's partial sums, the bank's straight-through gradients) are counted from
their tensors' sizes (each reads its inputs and writes its outputs once).

Arithmetic is counted on the tiles the programs execute (padding lanes included): `flop` the float multiplies and
adds (a multiply-add counts 2), `other` the compares and selects of the one-hot scatter and the softmax's max / exp.
Per launch the model gives three floors: memory (bytes / bandwidth), compute (flop at the FP32 FMA peak plus `other`
at one op per lane and clock) and latency (each scan program runs its steps one after another, and a step whose
loads are not software-pipelined waits about one memory round trip, STEP_LATENCY_S; programs run in waves of the
SMs' resident blocks). The predicted time of a launch is the largest floor; the layer's, their sum.

Call pattern (bench_kernels.py's): every floating input requires grad; no mask, no initial state; the loss uses both
outputs, so the backward receives the gradients of the states and of the final state, contiguous, in the outputs'
dtype. "bfloat16" means every floating input in bfloat16 (the kernels accumulate in float32, states are float32);
the complex diagonal scan takes complex64 only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field

from hf_ssm.ops.block.triton import _tiles
from hf_ssm.ops.diag.triton import BLOCK_D
from hf_ssm.ops.pd.triton import GEN_BLOCK_T, ONEHOT_MAX_N
from hf_ssm.ops.triton_common import cdiv, kernel_chunk_size, next_pow2

# Memory bandwidth (bytes/s): the datasheet figure and the device-to-device copy measured on this workplace's machines.
GPUS = {
    "H100": {"spec": 3.35e12, "measured": 3.0e12},
    "H200": {"spec": 4.8e12, "measured": 4.3e12},
}
SMS = 132  # both: GH100 with 132 SMs enabled
CLOCK_HZ = 1.98e9  # boost clock of the SXM parts
FP32_FLOPS = SMS * 128 * 2 * CLOCK_HZ  # 66.9 TFLOP/s: 128 FP32 lanes an SM, a multiply-add a clock
LANE_OPS = SMS * 128 * CLOCK_HZ  # compares / selects: one a lane and clock (an optimistic figure)
STEP_LATENCY_S = 0.5e-6  # an assumed load-to-use round trip to HBM; the latency floor scales with it
THREADS_PER_SM, BLOCKS_PER_SM = 2048, 32
DTYPES = {"float32": 4, "bfloat16": 2}
FAMILIES = ("diag_real", "diag_complex", "block_dense", "block_companion", "pd_dictionary", "pd_bank")
# The reference point cited beside the table: flash-linear-attention's chunked retention, fwd+bwd, B = 8, H = 32,
# D = 128, T = 4096, on an H100 (its own benchmark).
FLA_RETENTION_H100_S = 3.37e-3


@dataclass(frozen=True)
class Shape:
    """One problem: B rows of T steps; H heads of N states (diagonal width H*N; H*N / m blocks of m for the block
    scans); K dictionary / bank matrices; chunk the scans' time chunk (kernel_chunk_size(T) when None)."""

    batch: int = 8
    steps: int = 4096
    heads: int = 8
    state: int = 64
    block: int = 4
    dict_size: int = 16
    chunk: int | None = None

    @property
    def rows(self) -> int:
        return self.batch * self.steps

    @property
    def L(self) -> int:
        return self.chunk if self.chunk is not None else kernel_chunk_size(self.steps)

    @property
    def chunks(self) -> int:
        return max(1, cdiv(self.steps, self.L))


@dataclass
class Launch:
    """One kernel launch (kind "triton", bytes from its loads / stores) or torch operation (kind "torch", bytes from
    tensor sizes): bytes read / written, flop and other ops, grid, warps a program, serial steps of one program,
    launches (torch work of several operations), and `repeated`: the bytes of loads / atomics that touch an address
    another program of the launch touches too (the L2 may serve them; reads + writes - repeated is the launch's
    compulsory traffic)."""

    phase: str
    name: str
    kind: str
    reads: int
    writes: int
    flop: float = 0.0
    other: float = 0.0
    grid: tuple = ()
    warps: int = 4
    steps: int = 1
    launches: int = 1
    repeated: int = 0
    variant: dict = field(default_factory=dict)  # the constexprs that pick its compiled variant

    @property
    def programs(self) -> int:
        return math.prod(self.grid) if self.grid else 0

    def times(self, bandwidth: float, blocks_per_sm: int | None = None) -> dict:
        """The floors (s) at `bandwidth` bytes/s: memory (every load and store from HBM), memory_unique (the
        compulsory bytes only), compute, latency (with `blocks_per_sm` resident programs an SM, by default as many
        as the threads allow); predicted: the largest of memory, compute and latency; predicted_l2: the same with
        memory_unique (repeated loads served by the L2)."""
        memory = (self.reads + self.writes) / bandwidth
        memory_unique = (self.reads + self.writes - self.repeated) / bandwidth
        compute = self.flop / FP32_FLOPS + self.other / LANE_OPS
        latency = 0.0
        if self.kind == "triton":
            resident = SMS * (blocks_per_sm or min(BLOCKS_PER_SM, THREADS_PER_SM // (32 * self.warps)))
            latency = cdiv(self.programs, resident) * self.steps * STEP_LATENCY_S
        return {
            "memory": memory, "memory_unique": memory_unique, "compute": compute, "latency": latency,
            "predicted": max(memory, compute, latency), "predicted_l2": max(memory_unique, compute, latency),
        }  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# the diagonal scan (hf_ssm/ops/diag/triton.py)


def _convert(phase: str, name: str, elements: int, src: int, dst: int, launches: int = 1) -> list[Launch]:
    """A dtype conversion (torch .to), nothing when the sizes say it is a no-op."""
    return [] if src == dst else [Launch(phase, name, "torch", elements * src, elements * dst, launches=launches)]


def _cu_repeated(programs: int, rows: int) -> int:
    """Repeated bytes of the row boundaries every chunk program loads (two int32 of the rows + 1 in the table)."""
    return programs * 8 - (rows + 1) * 4


def _diag_pass(s: Shape, width: int, comp: int, e: int, reverse: bool) -> list[Launch]:
    """The summary / carry / apply launches of one diag pass over `width` channels of `comp` float components;
    a / b (forward) in `e`-byte floats, the reverse pass's g in float32. Flop a channel-step: (real, complex)."""
    phase = "bwd" if reverse else "fwd"
    S, C, L, R, nd = s.batch, s.chunks, s.L, s.rows, cdiv(width, BLOCK_D)
    state = width * comp * 4  # one float32 state (or cum / loc / starts row) of a sequence
    g_bytes = 4 if reverse else e
    cx = comp == 2
    v = {"COMPLEX": cx, "REVERSE": reverse}
    out = []
    if C > 1:
        out.append(Launch(
            phase, "_diag_summary_kernel", "triton", variant=v, grid=(S * C, nd), steps=min(L, s.steps),
            reads=S * C * nd * 8 + R * width * comp * (e + g_bytes), writes=2 * S * C * state,
            flop=R * nd * BLOCK_D * (14 if cx else 3), repeated=_cu_repeated(S * C * nd, S),
        ))  # fmt: skip
        out.append(Launch(
            phase, "_diag_carry_kernel", "triton", variant=v, grid=(S, nd), steps=C,
            reads=2 * S * C * state + (S * state if reverse else 0), writes=S * C * state,
            flop=S * C * nd * BLOCK_D * (8 if cx else 2),
        ))  # fmt: skip
    elif not reverse:
        out.append(Launch(phase, "zeros (single-chunk starts)", "torch", 0, S * state))
    reads = S * C * nd * 8 + S * C * state + R * width * comp * (e + g_bytes)
    writes = R * width * comp * 4 + S * state
    if reverse:  # lambda and grad_a stored; x_{t-1} read back for every step but each row's first
        reads += (R - S) * width * comp * 4
        writes += R * width * comp * 4
    flop = R * nd * BLOCK_D * ((14 if cx else 3) if reverse else (8 if cx else 2))
    out.append(Launch(phase, "_diag_apply_kernel", "triton", reads, writes, flop, variant=v, grid=(S * C, nd),
                      steps=min(L, s.steps), repeated=_cu_repeated(S * C * nd, S)))  # fmt: skip
    return out


def diag_launches(s: Shape, dtype: str, complex_: bool) -> list[Launch]:
    """diag_scan(a, b) forward and backward over H*N channels (complex: complex64 only)."""
    e = 4 if complex_ else DTYPES[dtype]
    width, comp = s.heads * s.state, 2 if complex_ else 1
    n = s.rows * width * comp
    final = s.batch * width * comp
    fwd = _diag_pass(s, width, comp, e, False) + _convert("fwd", "states, final to input dtype", n + final, 4, e, 2)
    bwd = _convert("bwd", "grad_states, grad_final to float32", n + final, e, 4, 2)
    bwd += _diag_pass(s, width, comp, e, True)
    bwd += _convert("bwd", "grad_a, grad_b to input dtype", 2 * n, 4, e, 2)
    return fwd + bwd


# ---------------------------------------------------------------------------------------------------------------
# the block scans (hf_ssm/ops/block/triton.py)


def _block_flop(mp: int) -> dict:
    """Flop a block and step on the (MP, MP) tile: a matrix-vector product MP^2 multiplies + MP (MP - 1) adds."""
    mv = 2 * mp * mp - mp
    mm = mp * mv
    return {"summary": mv + mp + mm, "apply": mv + mp, "carry": mv + mp, "rev_apply": mp + mp * mp + mv}


def _block_pass(s: Shape, companion: bool, e: int, reverse: bool) -> list[Launch]:
    """The summary / carry / apply launches of one block pass; A / first rows and b / v (forward) in `e` bytes."""
    phase = "bwd" if reverse else "fwd"
    m = s.block
    nb, mp = s.heads * s.state // m, next_pow2(m)
    bn, bn_sum = _tiles(nb, mp)
    S, C, L, R = s.batch, s.chunks, s.L, s.rows
    a_step = nb * m * (e if companion else m * e)  # first rows or whole matrices of one step
    g_step = nb * m * 4 if reverse else nb * (1 if companion else m) * e  # v is one scalar a block
    state = nb * m * 4
    fl = _block_flop(mp)
    v = {"COMPANION": companion, "REVERSE": reverse, "MP": mp, "BN": bn}
    out = []
    if C > 1:
        out.append(Launch(
            phase, "_block_summary_kernel", "triton", variant={**v, "BN": bn_sum}, grid=(S * C, cdiv(nb, bn_sum)),
            steps=min(L, s.steps),
            reads=S * C * cdiv(nb, bn_sum) * 8 + R * (a_step + g_step), writes=S * C * (state + nb * m * m * 4),
            flop=R * cdiv(nb, bn_sum) * bn_sum * fl["summary"], repeated=_cu_repeated(S * C * cdiv(nb, bn_sum), S),
        ))  # fmt: skip
        out.append(Launch(
            phase, "_block_carry_kernel", "triton", variant={"REVERSE": reverse, "MP": mp, "BN": bn},
            grid=(S, cdiv(nb, bn)), steps=C,
            reads=S * C * (state + nb * m * m * 4) + (S * state if reverse else 0), writes=S * C * state,
            flop=S * C * cdiv(nb, bn) * bn * fl["carry"],
        ))  # fmt: skip
    elif not reverse:
        out.append(Launch(phase, "zeros (single-chunk starts)", "torch", 0, S * state))
    reads = S * C * cdiv(nb, bn) * 8 + S * C * state + R * (a_step + g_step)
    writes = R * nb * m * 4 + S * state
    if reverse:  # lambda and grad_A (first rows only for companion) stored; h_{t-1} read back
        reads += (R - S) * nb * m * 4
        writes += R * nb * m * (1 if companion else m) * 4
    flop = R * cdiv(nb, bn) * bn * (fl["rev_apply"] if reverse else fl["apply"])
    out.append(Launch(phase, "_block_apply_kernel", "triton", reads, writes, flop, variant=v,
                      grid=(S * C, cdiv(nb, bn)), steps=min(L, s.steps),
                      repeated=_cu_repeated(S * C * cdiv(nb, bn), S)))  # fmt: skip
    return out


def block_launches(s: Shape, dtype: str, companion: bool) -> list[Launch]:
    """block_scan(A, b) or companion_scan(a, v) forward and backward over H*N / m blocks of m."""
    e, m = DTYPES[dtype], s.block
    nb = s.heads * s.state // m
    states = (s.rows + s.batch) * nb * m  # the states and the final state
    fwd = _block_pass(s, companion, e, False) + _convert("fwd", "states, final to input dtype", states, 4, e, 2)
    bwd = _convert("bwd", "grad_states, grad_final to float32", states, e, 4, 2) + _block_pass(s, companion, e, True)
    bwd += _convert("bwd", "grad_A to input dtype", s.rows * nb * m * (1 if companion else m), 4, e)
    bwd += _convert("bwd", "grad_b to input dtype", s.rows * nb * (1 if companion else m), 4, e)
    return fwd + bwd


# ---------------------------------------------------------------------------------------------------------------
# the PD scans (hf_ssm/ops/pd/triton.py)


def _scatter(np_: int, onehot: bool) -> tuple[int, int, int, int]:
    """(flop, other ops, bytes read, bytes written) of one scatter-add of NP complex lanes: the one-hot product
    (NP x NP compares, selects and sums, re and im) or atomic adds through a scratch row (zeroed, added, read)."""
    if onehot:
        return 2 * np_ * (np_ - 1), 3 * np_ * np_, 0, 0
    return 2 * np_, 0, 2 * np_ * 4 * 2, 2 * np_ * 4 * 2  # the atomics read and write; zeros, then the row read


def _pd_step_bytes(s: Shape, e: int, reverse: bool, bank: bool) -> int:
    """Bytes one (head, step) loads for idx_t, dv_t and g_t: stored int64 idx or the bank's logits row and int32
    row; dv pairs in `e` bytes, g in `e` (forward input) or float32 (reverse)."""
    n = s.state
    idx = s.dict_size * 4 + n * 4 if bank else n * 8
    return idx + 2 * n * e + 2 * n * (4 if reverse else e)


def _pd_pass(s: Shape, e: int, reverse: bool, bank: bool, write_z: bool) -> list[Launch]:
    """The summary / carry / apply launches of one PD pass (one-hot scatter for N <= ONEHOT_MAX_N, else atomic)."""
    phase, prefix = ("bwd" if reverse else "fwd"), ("_pd_bank" if bank else "_pd")
    S, C, L, R, H, n = s.batch, s.chunks, s.L, s.rows, s.heads, s.state
    np_, onehot = next_pow2(n), n <= ONEHOT_MAX_N
    warps = 8 if np_ >= 128 else 4
    sc_flop, sc_other, sc_r, sc_w = _scatter(np_, onehot)
    step = _pd_step_bytes(s, e, reverse, bank)
    head_state = n * 8  # one float32 complex state (or loc / cdv / starts row) of a head
    # the bank's (H, K, N) int32 rows are read by every step
    bank_repeat = R * H * n * 4 - H * s.dict_size * n * 4 if bank else 0
    v = {"REVERSE": reverse, "ONEHOT": onehot, "NP": np_}
    out = []
    if C > 1:
        scat = 0 if reverse else 1  # the forward summary composes by scatter; the reverse one by gathers
        out.append(Launch(
            phase, f"{prefix}_summary_kernel", "triton", variant=v, grid=(S * C, H), warps=warps, steps=min(L, s.steps),
            reads=S * C * H * 8 + R * H * (step + scat * sc_r), writes=S * C * H * n * 20 + R * H * scat * sc_w,
            flop=R * H * (14 * np_ + scat * sc_flop), other=R * H * scat * sc_other,
            repeated=_cu_repeated(S * C * H, S) + bank_repeat,
        ))  # fmt: skip
        out.append(Launch(
            phase, "_pd_carry_kernel", "triton", variant=v, grid=(S, H), warps=warps, steps=C,
            reads=S * C * H * (n * 20 + scat * sc_r) + (S * H * head_state if reverse else 0),
            writes=S * C * H * (head_state + scat * sc_w),
            flop=S * C * H * (8 * np_ + scat * sc_flop), other=S * C * H * scat * sc_other,
        ))  # fmt: skip
    elif not reverse:
        out.append(Launch(phase, "zeros (single-chunk starts)", "torch", 0, S * H * head_state))
    reads = S * C * H * (8 + head_state) + R * H * step
    writes = R * H * head_state + S * H * head_state
    if reverse:  # lambda, grad_dv (and z) stored; x_{t-1} read back for every step but each row's first
        reads += (R - S) * H * head_state
        writes += R * H * head_state * (2 if write_z else 1)
        flop, other = R * H * (20 if write_z else 14) * np_, 0
    else:
        reads, writes = reads + R * H * sc_r, writes + R * H * sc_w
        flop, other = R * H * (8 * np_ + sc_flop), R * H * sc_other
    out.append(Launch(phase, f"{prefix}_apply_kernel", "triton", reads, writes, flop, other, variant=v,
                      grid=(S * C, H), warps=warps, steps=min(L, s.steps),
                      repeated=_cu_repeated(S * C * H, S) + bank_repeat))  # fmt: skip
    return out


def _generation_launches(s: Shape, e: int) -> tuple[list[Launch], list[Launch]]:
    """The dictionary mode's P generation: _pd_select_kernel (forward) and _pd_generation_backward_kernel with the
    torch work around it (backward). sel (R, H, K) and the dictionary (H, K, N, N) in `e` bytes."""
    R, H, K, n = s.rows, s.heads, s.dict_size, s.state
    bt, kp, np_ = GEN_BLOCK_T, max(16, next_pow2(K)), max(16, next_pow2(n))
    blocks = cdiv(R, bt)
    dot = 2 * bt * kp * np_
    dict_bytes = H * K * n * n * e
    select = Launch(
        "fwd", "_pd_select_kernel", "triton", variant={"KP": kp, "NP": np_}, grid=(blocks, H, n),
        reads=H * n * (R * K * e + blocks * K * n * e), writes=R * H * n * 8, flop=blocks * H * n * dot,
        repeated=(n - 1) * R * H * K * e + (blocks - 1) * dict_bytes,  # sel rows for every column, M for every block
    )  # fmt: skip
    splits = max(1, min(blocks, 1024 // max(1, H * n)))
    per_split = cdiv(blocks, splits)
    splits = cdiv(blocks, per_split)
    visited = splits * per_split  # time blocks the programs loop over (those past R load no rows)
    per_column_reads = R * K * e + visited * K * n * e + R * n * 8 + R * 8 + R * K * 4  # sel, M col, lam, z, gsel
    backward = Launch(
        "bwd", "_pd_generation_backward_kernel", "triton", variant={"KP": kp, "NP": np_}, grid=(H * n, splits),
        warps=8 if kp * np_ >= 4096 else 4, steps=per_split,
        reads=H * n * per_column_reads, writes=H * n * (R * K * 4 + splits * K * n * 4),
        flop=H * n * visited * (3 * dot + 12 * bt * np_), other=H * n * visited * 2 * bt * np_,
        # sel rows, lambda rows and grad_sel (read and written by the atomics) for every column; M for every block
        repeated=(n - 1) * R * H * (K * e + n * 8 + 2 * K * 4) + (visited - 1) * dict_bytes,
    )  # fmt: skip
    dict_elems = H * K * n * n
    around = [
        Launch("bwd", "zeros (grad_sel)", "torch", 0, R * H * K * 4),
        backward,
        Launch("bwd", "grad_dictionary partial sums .sum(0)", "torch", splits * dict_elems * 4, dict_elems * 4),
    ]
    around += _convert("bwd", "grad_sel, grad_dictionary to input dtype", R * H * K + dict_elems, 4, e, 2)
    return [select], around


def _bank_torch(s: Shape, e: int) -> tuple[list[Launch], list[Launch]]:
    """The bank mode's torch work, from tensor sizes: logits to float32 and the bank's argmax (forward); the
    straight-through gradients of the logits and score matrices from lambda and z (backward,
    hf_ssm.ops.pd.bank.bank_straight_through_grads)."""
    R, H, K, n = s.rows, s.heads, s.dict_size, s.state
    tok = R * H * n * 8  # one complex64 (B, T, H, N) tensor: lambda, z, the gather buffer
    lg = R * H * K * 4  # one float32 (B, T, H, K) tensor
    mats = H * K * n * n * 4  # one float32 (H, K, N, N) tensor
    fwd = _convert("fwd", "logits to float32", R * H * K, e, 4)
    fwd += _convert("fwd", "scores to float32", H * K * n * n, e, 4)
    fwd.append(
        Launch("fwd", "bank = scores.argmax(-2) as int32", "torch", mats + H * K * n * 8, H * K * n * 12, launches=2)
    )
    # per bank entry k: gather lambda (as float64) into a buffer, multiply by z in place, sum over N, copy into out[k]
    choice = Launch("bwd", "choice gradient: K x (gather, product, sum)", "torch", K * (4 * tok + R * H * 4),
                    K * (2 * tok + 2 * R * H * 4), flop=K * R * H * n * 4, launches=4 * K)  # fmt: skip
    # the argmax of the logits, then softmax(logits / tau) and its Jacobian product: ten passes read, six written
    logits = Launch("bwd", "argmax(logits), softmax straight-through", "torch", 10 * lg, 6 * lg + R * H * 8,
                    flop=10 * R * H * K, launches=8)  # fmt: skip
    # per head: its choices sorted (about four passes) and counted; lambda and z copied in choice order; one
    # (N x 2 cnt) @ (2 cnt x N) product per bank entry, copied into its slot
    outer = Launch("bwd", "bank outer sums: H x (sort, count, 2 copies, K products)", "torch",
                   H * 5 * R * 8 + 4 * tok + 2 * mats, H * 4 * R * 8 + 2 * tok + 2 * mats,
                   flop=4 * R * H * n * n, launches=H * (6 + 2 * K))  # fmt: skip
    scores = Launch("bwd", "softmax(scores) and its column backward", "torch", 6 * mats, 5 * mats,
                    flop=10 * H * K * n * n, launches=7)  # fmt: skip
    bwd = [choice, logits, outer, scores]
    bwd += _convert("bwd", "grad_logits, grad_scores to input dtype", R * H * K + H * K * n * n, 4, e, 2)
    return fwd, bwd


def pd_launches(s: Shape, dtype: str, mode: str) -> list[Launch]:
    """pd_dictionary_scan (mode "dictionary") or pd_bank_scan ("bank") forward and backward, dv / b as (re, im)
    pairs and the selection inputs in `dtype`."""
    e = DTYPES[dtype]
    bank = mode == "bank"
    pairs = s.rows * s.heads * s.state * 2
    if bank:
        pre, post = _bank_torch(s, e)
    else:
        pre, post = _generation_launches(s, e)
    fwd = pre + _pd_pass(s, e, False, bank, False)
    # the reverse pass writes lambda and z, from which the selection's gradients are formed after it
    bwd = _pd_pass(s, e, True, bank, True) + post
    bwd += _convert("bwd", "grad_dv, grad_b to input dtype", 2 * pairs, 4, e, 2)
    return fwd + bwd


def family_launches(family: str, s: Shape, dtype: str) -> list[Launch]:
    """Every launch of one fwd+bwd of `family` (FAMILIES) with `dtype` inputs (DTYPES)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {list(FAMILIES)}, got {family!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    if family.startswith("diag"):
        if family == "diag_complex" and dtype != "float32":
            raise ValueError("diag_complex takes complex64 inputs only (dtype 'float32')")
        return diag_launches(s, dtype, family == "diag_complex")
    if family.startswith("block"):
        if (s.heads * s.state) % s.block:
            raise ValueError(f"the block scans need H*N divisible by m; got H*N = {s.heads * s.state}, m = {s.block}")
        return block_launches(s, dtype, family == "block_companion")
    return pd_launches(s, dtype, family.removeprefix("pd_"))


# ---------------------------------------------------------------------------------------------------------------
# report


def resident_blocks(launch: Launch, resources: list[dict] | None) -> int | None:
    """Blocks an SM of the launch's compiled variant among `resources` (the records of compile_check --json): the
    first record of its kernel and warps whose constexprs agree with the launch's `variant`; None without one."""
    if not resources or launch.kind != "triton":
        return None
    for r in resources:
        same = r["kernel"] == launch.name and r["num_warps"] == launch.warps and not r.get("error")
        if same and all(r["constexprs"].get(k) == v for k, v in launch.variant.items()):
            return r["blocks_per_sm"]
    return None


def _row(launch: Launch, resources: list[dict] | None = None) -> dict:
    """A launch as a JSON row: its counts, its resident blocks an SM (None: as many as the threads allow) and, per
    GPU at its measured bandwidth, the floors and the prediction."""
    row = asdict(launch)
    row["grid"] = list(launch.grid)
    row["programs"] = launch.programs
    row["blocks_per_sm"] = blocks = resident_blocks(launch, resources)
    row["times_s"] = {gpu: launch.times(bw["measured"], blocks) for gpu, bw in GPUS.items()}
    return row


def totals(launches: list[Launch], resources: list[dict] | None = None) -> dict:
    """One fwd+bwd: bytes (from loads / stores, and compulsory) and flop of the Triton launches and of the torch
    operations, launch counts, the memory floor at each GPU's spec and measured bandwidth, and the predicted time at
    the measured bandwidth per phase and in all: the sum of every launch's largest floor, with every load from HBM
    (`predicted`) or with repeated loads served by the L2 (`predicted_l2`)."""
    out = {}
    for kind in ("triton", "torch"):
        mine = [x for x in launches if x.kind == kind]
        out[f"{kind}_bytes"] = sum(x.reads + x.writes for x in mine)
        out[f"{kind}_unique_bytes"] = sum(x.reads + x.writes - x.repeated for x in mine)
        out[f"{kind}_launches"] = sum(x.launches for x in mine)
    out["flop"] = sum(x.flop for x in launches)
    moved = out["triton_bytes"] + out["torch_bytes"]
    for gpu, bw in GPUS.items():
        out[f"{gpu}_memory_floor_spec_s"] = moved / bw["spec"]
        out[f"{gpu}_memory_floor_measured_s"] = moved / bw["measured"]
        for key in ("predicted", "predicted_l2"):
            for phase in ("fwd", "bwd"):
                mine = [
                    x.times(bw["measured"], resident_blocks(x, resources))[key] for x in launches if x.phase == phase
                ]
                out[f"{gpu}_{phase}_{key}_s"] = sum(mine)
            out[f"{gpu}_{key}_s"] = out[f"{gpu}_fwd_{key}_s"] + out[f"{gpu}_bwd_{key}_s"]
    return out


def report(shape: Shape, families=FAMILIES, dtypes=tuple(DTYPES), resources: list[dict] | None = None) -> dict:
    """Every launch and the totals of each family and dtype (diag_complex in float32 only) at `shape`; the latency
    floors with the resident blocks of the compiled variants in `resources` (compile_check --json records)."""
    results = []
    for family in families:
        for dtype in dtypes:
            if family == "diag_complex" and dtype != "float32":
                continue
            launches = family_launches(family, shape, dtype)
            rows = [_row(x, resources) for x in launches]
            results.append({"family": family, "dtype": dtype, "launches": rows, "totals": totals(launches, resources)})
    assumptions = {
        "bandwidth_bytes_per_s": GPUS, "sms": SMS, "clock_hz": CLOCK_HZ, "fp32_flop_per_s": FP32_FLOPS,
        "lane_ops_per_s": LANE_OPS, "step_latency_s": STEP_LATENCY_S, "resident_blocks_from": (
            "compile_check records" if resources else "the thread limit (no compile_check records given)"),
        "fla_chunk_retention_h100_fwdbwd_s": FLA_RETENTION_H100_S,
    }  # fmt: skip
    return {"shape": {**asdict(shape), "chunk": shape.L, "chunks": shape.chunks}, "assumptions": assumptions,
            "results": results}  # fmt: skip


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f}"


def markdown(rep: dict, launch_dtypes=tuple(DTYPES)) -> str:
    """The totals table, then one table of launches per family and dtype in `launch_dtypes`."""
    sh = rep["shape"]
    lines = [
        f"B = {sh['batch']}, T = {sh['steps']}, H = {sh['heads']}, N = {sh['state']}, m = {sh['block']}, "
        f"K = {sh['dict_size']}, chunk {sh['chunk']} ({sh['chunks']} chunks). MB = 1e6 bytes; times in us; "
        "predicted at the measured bandwidth (H100 3.0, H200 4.3 TB/s), as fwd + bwd = total, with every load "
        "from HBM, and (L2) with repeated loads served by the L2.",
        "",
        "| family | inputs | Triton MB (unique) | torch MB | launches Triton + torch | GFLOP | memory floor H100 spec "
        "/ measured | memory floor H200 spec / measured | predicted H100 | predicted H200 | predicted (L2) H100 / "
        "H200 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rep["results"]:
        t = r["totals"]
        lines.append(
            f"| {r['family']} | {r['dtype']} | {t['triton_bytes'] / 1e6:,.0f} ({t['triton_unique_bytes'] / 1e6:,.0f})"
            f" | {t['torch_bytes'] / 1e6:,.0f} | {t['triton_launches']} + {t['torch_launches']} | "
            f"{t['flop'] / 1e9:,.1f} | {_us(t['H100_memory_floor_spec_s'])} / {_us(t['H100_memory_floor_measured_s'])}"
            f" | {_us(t['H200_memory_floor_spec_s'])} / {_us(t['H200_memory_floor_measured_s'])} | "
            + " | ".join(
                f"{_us(t[f'{g}_fwd_predicted_s'])} + {_us(t[f'{g}_bwd_predicted_s'])} = {_us(t[f'{g}_predicted_s'])}"
                for g in GPUS
            )
            + f" | {_us(t['H100_predicted_l2_s'])} / {_us(t['H200_predicted_l2_s'])} |"
        )
    for r in rep["results"]:
        if r["dtype"] in launch_dtypes:
            lines += ["", *_launch_table(r)]
    return "\n".join(lines) + "\n"


def _launch_table(result: dict) -> list[str]:
    """Markdown rows of one family's launches: counts, the H100 floors and the predictions."""
    lines = [
        f"{result['family']}, {result['dtype']} inputs:",
        "",
        "| pass | launch | grid x warps, steps, blocks/SM | read MB | written MB | unique MB | GFLOP | "
        "H100 floors: memory / unique / compute / latency | predicted H100 | predicted H200 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in result["launches"]:
        h100, h200 = x["times_s"]["H100"], x["times_s"]["H200"]
        where = f"torch, {x['launches']} ops"
        if x["kind"] == "triton":
            where = f"{tuple(x['grid'])} x {x['warps']}, {x['steps']}, {x['blocks_per_sm'] or '(threads)'}"
        floors = " / ".join(_us(h100[k]) for k in ("memory", "memory_unique", "compute", "latency"))
        unique = x["reads"] + x["writes"] - x["repeated"]
        lines.append(
            f"| {x['phase']} | {x['name']} | {where} | {x['reads'] / 1e6:,.1f} | {x['writes'] / 1e6:,.1f} | "
            f"{unique / 1e6:,.1f} | {x['flop'] / 1e9:,.2f} | {floors} | {_us(h100['predicted'])} | "
            f"{_us(h200['predicted'])} |"
        )
    return lines


RENAMED_OPTIONS = frozenset({"--dict-size", "--launch-dtypes"})  # before the underscores (2026-12)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8, help="B")
    parser.add_argument("--steps", type=int, default=4096, help="T")
    parser.add_argument("--heads", type=int, default=8, help="H")
    parser.add_argument("--state", type=int, default=64, help="N, states a head")
    parser.add_argument("--blocks", type=int, default=4, help="m, the block scans' block size / order")
    parser.add_argument("--dict_size", type=int, default=16, help="K, dictionary / bank matrices a head")
    parser.add_argument("--chunk", type=int, default=None, help="time chunk (default: the kernels' own rule)")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--launch_dtypes", nargs="*", default=["float32"], choices=list(DTYPES),
                        help="dtypes whose per-launch tables are printed (the JSON has them all)")  # fmt: skip
    parser.add_argument(
        "--resources", default=None, help="compile_check --json output: resident blocks an SM of every compiled variant"
    )
    parser.add_argument("--json", default=None, help="write the whole report here as JSON")
    parser.add_argument("--markdown", default=None, help="write the printed tables here as markdown")
    given = sys.argv[1:] if argv is None else argv
    for old in RENAMED_OPTIONS & {a.split("=")[0] for a in given}:  # every option has one spelling, as the
        parser.error(f"{old} was renamed: use --{old[2:].replace('-', '_')}")  # benchmarks' (legacy_settings.py)
    args = parser.parse_args(argv)
    for name in ("batch", "steps", "heads", "state", "blocks", "dict_size"):
        if getattr(args, name) < 1:
            raise SystemExit(f"roofline: --{name} must be >= 1, got {getattr(args, name)}")
    shape = Shape(args.batch, args.steps, args.heads, args.state, args.blocks, args.dict_size, args.chunk)
    resources = None
    if args.resources:
        with open(args.resources) as f:
            resources = json.load(f)["variants"]
    rep = report(shape, args.families, args.dtypes, resources)
    text = markdown(rep, tuple(args.launch_dtypes))
    print(text, end="")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=1)
            f.write("\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
