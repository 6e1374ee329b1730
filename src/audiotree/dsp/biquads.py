"""Cascaded biquads (second-order sections) in NumPy, computed block by block.

A sample-by-sample IIR loop in Python costs microseconds per sample, and the C
filter everyone uses (``scipy.signal.sosfilt``) drags ``scipy.signal`` into
every process that meters: about 50 MB of RSS and a second of CPU per data
loader worker. This module computes the same causal filter exactly, with a few
matrix products, and imports nothing beyond NumPy.

Method. The cascade is one linear state-space system ``s[n+1] = A s[n] + B x[n]``,
``y[n] = C s[n] + D x[n]`` (two states per section, transposed direct form II,
the same realisation as SciPy's). The signal is cut into blocks of ``L``
samples. Within a block, ``y = T x + O s0``, where ``T`` is the ``L x L``
lower-triangular Toeplitz matrix of the impulse response and ``O`` maps the
block's initial state to its outputs; the state moves on as
``s1 = A^L s0 + G x``. The inputs' share of every block's end state (``G x``)
is one matrix product over all blocks; the carry from block to block is a
prefix sum under the matrix ``A^L``, done by recursive doubling in
``log2(blocks)`` vectorised steps; then every block's output is one more matrix
product. Everything is float64; the result matches ``sosfilt`` to about 1e-11
relative (rounding differs, the arithmetic is the same linear map), and is
bit-identical run to run on one machine.

Zero samples appended to complete the last block never reach an output that is
kept (the filter is causal), and the final state is advanced through the real
samples only.

>>> import numpy as np
>>> sos = np.array([[0.5, 0.0, 0.0, 1.0, -0.5, 0.0]])  # y[n] = 0.5 x[n] + 0.5 y[n-1]
>>> sosfilt_blocks(sos, np.array([1.0, 0.0, 0.0, 0.0])).tolist()
[0.5, 0.25, 0.125, 0.0625]
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["sosfilt_blocks"]

#: Block length. 64 is the fastest on the machines measured (PROFILE.md): the
#: Toeplitz product costs ``L`` multiply-adds per sample, the carry
#: ``16 log2(T / L)`` per block.
BLOCK = 64
#: Blocks per matrix product (see ``sosfilt_blocks``).
ROWS = 64
#: Groups of ``ROWS`` blocks per output step: temporaries of 96 KiB stay below
#: glibc's mmap threshold (128 KiB), so they reuse heap pages.
CHUNK_GROUPS = 3


def _state_space(sos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``(A, B, C, D)`` of the cascade; state ``[z1, z2]`` of section 0, then section 1, ..."""
    n = 2 * sos.shape[0]
    a_mat, b_vec = np.zeros((n, n)), np.zeros(n)
    c_in, d_in = np.zeros(n), 1.0  # the current section's input as a function of (state, x)
    for i, (b0, b1, b2, _, a1, a2) in enumerate(sos):
        j = 2 * i
        c_out, d_out = b0 * c_in, b0 * d_in  # y = b0 u + z1
        c_out[j] += 1.0
        a_mat[j] = b1 * c_in - a1 * c_out  # z1' = b1 u - a1 y + z2
        a_mat[j, j + 1] += 1.0
        b_vec[j] = b1 * d_in - a1 * d_out
        a_mat[j + 1] = b2 * c_in - a2 * c_out  # z2' = b2 u - a2 y
        b_vec[j + 1] = b2 * d_in - a2 * d_out
        c_in, d_in = c_out, d_out
    return a_mat, b_vec, c_in, d_in


@functools.lru_cache(maxsize=64)
def _block_operators(sos_key: bytes, sections: int, block: int):
    """The matrices of one block, cached per filter (``sos_key`` = the SOS bytes)."""
    sos = np.frombuffer(sos_key, dtype=np.float64).reshape(sections, 6)
    if not np.allclose(sos[:, 3], 1.0):
        raise ValueError("second-order sections must be normalised (a0 == 1)")
    a_mat, b_vec, c_vec, d = _state_space(sos)
    powers = [np.eye(a_mat.shape[0])]
    for _ in range(block):
        powers.append(a_mat @ powers[-1])
    impulse = np.array([d] + [c_vec @ powers[m - 1] @ b_vec for m in range(1, block)])
    toeplitz = np.zeros((block, block))
    for i in range(block):
        toeplitz[i, : i + 1] = impulse[i::-1]
    gain = np.stack([powers[block - 1 - j] @ b_vec for j in range(block)])  # (L, n): x[j] -> end state
    from_state = np.stack([c_vec @ powers[i] for i in range(block)], axis=1)  # (n, L): s0 -> outputs
    # A block's inputs -> its outputs (x @ T^T) and -> its end state (x @ G).
    return np.ascontiguousarray(toeplitz.T), gain, from_state, np.stack(powers)


def sosfilt_blocks(sos, x, *, zi=None):
    """Filter ``x`` along its last axis with the cascade ``sos``, from rest or from ``zi``.

    Args:
      sos: ``(sections, 6)`` rows ``[b0, b1, b2, 1, a1, a2]`` (as SciPy's ``sosfilt``).
      x: ``(..., T)`` real samples, any float or int dtype (computed in float64).
      zi: optional ``(..., 2 * sections)`` initial state (the ``zf`` of a previous
        call on the preceding samples); ``None`` starts at rest.

    Returns:
      float64 ``(..., T)`` output when ``zi`` is None, else ``(y, zf)`` with the
      state after the last sample, so consecutive chunks filter exactly as the
      whole signal does. Deterministic.
    """
    sos = np.ascontiguousarray(sos, dtype=np.float64)
    if sos.ndim != 2 or sos.shape[1] != 6:
        raise ValueError(f"sos must have shape (sections, 6), got {sos.shape}")
    x = np.asarray(x)
    lead, t = x.shape[:-1], x.shape[-1]
    order = 2 * sos.shape[0]
    to_outputs, to_state, from_state, powers = _block_operators(sos.tobytes(), sos.shape[0], BLOCK)
    signals = int(np.prod(lead, dtype=np.int64))
    blocks = max(1, -(-t // BLOCK))
    rows = min(ROWS, blocks)
    blocks = -(-blocks // rows) * rows  # whole groups of rows (the extra blocks are zeros)
    padded = np.zeros((signals, blocks * BLOCK))
    padded[:, :t] = x.reshape(signals, t)
    groups = padded.reshape(-1, rows, BLOCK)
    # The inputs' share of each block's end state, blocks first: (blocks, signals, n).
    carry = np.matmul(groups, to_state).reshape(signals, blocks, order).transpose(1, 0, 2).copy()
    start = None if zi is None else np.asarray(zi, dtype=np.float64).reshape(signals, order)
    if start is not None:
        carry[0] += start @ powers[BLOCK].T
    # Inclusive prefix sum under A^L, by recursive doubling: carry[k] becomes the state
    # at the end of block k. Blocks first, so each step is one 2-D product.
    flat = carry.reshape(-1, order)
    shift, step = 1, powers[BLOCK].T.copy()
    while shift < blocks:
        flat[shift * signals:] += flat[: (blocks - shift) * signals] @ step
        step = step @ step
        shift *= 2
    states = np.empty((signals, blocks, order))  # block k starts in the state block k-1 ended in
    states[:, 1:] = carry[:-1].transpose(1, 0, 2)
    states[:, 0] = 0.0 if start is None else start
    end = None
    if zi is not None:
        last_block = max(0, (t - 1) // BLOCK)
        real = t - last_block * BLOCK  # samples of that block that are not padding
        last = padded[:, last_block * BLOCK: t]
        end = states[:, last_block] @ powers[real].T + last @ to_state[BLOCK - real:]
    # Outputs, written over the input a few groups at a time: a second signal-sized
    # buffer would cost more in fresh pages (page faults) than its products take.
    states = states.reshape(-1, rows, order)
    for first in range(0, groups.shape[0], CHUNK_GROUPS):
        part = slice(first, first + CHUNK_GROUPS)
        y = np.matmul(groups[part], to_outputs)
        y += np.matmul(states[part], from_state)
        groups[part] = y
    out = padded[:, :t].reshape(lead + (t,))
    if zi is None:
        return out
    return out, end.reshape(lead + (order,))
