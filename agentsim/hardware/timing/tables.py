"""Step-time tables built from aiconfigurator-core's measured per-operation databases.

aiconfigurator-core (NVIDIA, Apache-2.0) composes an engine step from per-operation latencies
measured on each GPU system with each serving engine. A direct call costs 2-800 us, too slow for
every batch iteration, so each deployment is tabulated once:

* ``non_attention[tokens]``: every context-phase operation whose cost does not depend on the
  cached context (GEMMs, MoE, norms, all-reduce, dispatch), for ``tokens`` tokens in one step;
* ``chunk_attention[new, context]``: the context-dependent operations for one prefill chunk of
  ``new`` tokens after ``context`` earlier tokens;
* ``decode_attention[batch, context]``: the context-dependent generation operations for
  ``batch`` decoding sequences of mean context ``context``;
* ``decode[batch, context]``: a whole decode-only step (``decode_step_latency``).

Which operations are context-dependent is found by probing (their time grows with the prefix),
not by name: for MLA models (DeepSeek, Kimi) the attention sits inside a fused ``mla_block``
operation together with its projections, and the engine's own mixed step evaluates that block
without the prefix or the decode context. Splitting it out this way prices a chunk after a long
cached prefix, and decoding sequences with long contexts, as the measured kernels do.

Tables are cached on disk (``$AGENTSIM_CACHE_DIR`` or ``~/.cache/agentsim/timing``), keyed by the
deployment and the package version; a missing or corrupt cache file is rebuilt. A deployment
they cannot time is cached as its message, so a fallback costs no rebuild per run either.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from agentsim.hardware.timing.deployment import Deployment
from agentsim.hardware.timing.interp import Table1D, Table2D, geometric_grid

PACKAGE = "aiconfigurator-core"
_PER_OCTAVE = 8
_MS = 1e-3


class TimingDataUnavailable(RuntimeError):
    """The databases cannot time this deployment (the message says why)."""


def package_version() -> str | None:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def cache_dir() -> Path:
    root = os.environ.get("AGENTSIM_CACHE_DIR")
    if root:
        return Path(root) / "timing"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentsim" / "timing"


@dataclass
class StepTables:
    """The four tables of one deployment, in seconds, plus where they came from."""

    tokens: list[int]
    news: list[int]
    contexts: list[int]
    batches: list[int]
    non_attention_s: list[float]
    chunk_attention_s: list[list[float]]
    decode_attention_s: list[list[float]]
    decode_s: list[list[float]]
    provenance: str

    def tables(self) -> tuple[Table1D, Table2D, Table2D, Table2D]:
        return (Table1D(self.tokens, self.non_attention_s),
                Table2D(self.news, self.contexts, self.chunk_attention_s),
                Table2D(self.batches, self.contexts, self.decode_attention_s),
                Table2D(self.batches, self.contexts, self.decode_s))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, tokens=self.tokens, news=self.news, contexts=self.contexts, batches=self.batches,
                     non_attention_s=self.non_attention_s, chunk_attention_s=self.chunk_attention_s,
                     decode_attention_s=self.decode_attention_s, decode_s=self.decode_s,
                     provenance=np.array(self.provenance))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "StepTables":
        with np.load(path, allow_pickle=False) as data:
            return cls(tokens=data["tokens"].tolist(), news=data["news"].tolist(), contexts=data["contexts"].tolist(),
                       batches=data["batches"].tolist(), non_attention_s=data["non_attention_s"].tolist(),
                       chunk_attention_s=data["chunk_attention_s"].tolist(),
                       decode_attention_s=data["decode_attention_s"].tolist(), decode_s=data["decode_s"].tolist(),
                       provenance=str(data["provenance"]))


def compile_engine(deployment: Deployment):
    """aiconfigurator-core's compiled engine for ``deployment`` (raises TimingDataUnavailable)."""
    if package_version() is None:
        raise TimingDataUnavailable(f"{PACKAGE} is not installed")
    # The package logs a warning per low-fidelity table it loads; the simulator reports the
    # timing source itself, so keep them out of the user's terminal.
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    from aiconfigurator_core.sdk.engine import EngineHandle

    kwargs = dict(tp_size=deployment.tp, pp_size=deployment.pp, attention_dp_size=deployment.attention_dp,
                  moe_tp_size=deployment.moe_tp, moe_ep_size=deployment.moe_ep,
                  gemm_quant_mode=deployment.gemm_quant, moe_quant_mode=deployment.moe_quant,
                  kvcache_quant_mode=deployment.kv_quant, fmha_quant_mode=deployment.fmha_quant)
    try:
        return EngineHandle.compile(deployment.model, deployment.system, deployment.backend,
                                    backend_version=deployment.backend_version, **kwargs)
    except Exception as exc:  # the package raises ValueError/KeyError/its own errors for unknown inputs
        raise TimingDataUnavailable(f"{PACKAGE} cannot build {deployment.describe()}: {_short(exc)}") from None


def _short(exc: BaseException) -> str:
    text = str(exc) or exc.__class__.__name__
    text = text.split(" at /")[0]  # drop the site-packages path of a missing-data message
    return text if len(text) < 300 else text[:297] + "..."


def _context_dependent(values_short: list[tuple], values_long: list[tuple]) -> list[bool]:
    return [long[1] > short[1] * 1.01 + 1e-6 for short, long in zip(values_short, values_long)]


def build_tables(deployment: Deployment) -> StepTables:
    """Tabulate ``deployment`` from the databases (about a second; raises TimingDataUnavailable)."""
    handle = compile_engine(deployment)
    engine = handle._engine
    try:
        n_ctx = _count_ops(lambda i: engine.evaluate_context_ops([i], 1, 1, 0, 1.0, None))
        n_gen = _count_ops(lambda i: engine.evaluate_generation_ops([i], 1, 1, 1.0, 0, None))
        ctx_ops, gen_ops = list(range(n_ctx)), list(range(n_gen))
        # One operation per query: the engine merges operations of the same name in its answer
        # (gpt-oss has two ``context_attention``, its sliding-window and full layers), so the
        # answer to a list does not line up with the list.
        ctx_dep = [_context_dependent(engine.evaluate_context_ops([i], 1, 1024, 0, 1.0, None),
                                      engine.evaluate_context_ops([i], 1, 1024, 16384, 1.0, None))[0] for i in ctx_ops]
        gen_dep = [_context_dependent(engine.evaluate_generation_ops([i], 8, 1024, 1.0, 0, None),
                                      engine.evaluate_generation_ops([i], 8, 16384, 1.0, 0, None))[0] for i in gen_ops]
        attn_ctx = [i for i in ctx_ops if ctx_dep[i]]
        rest_ctx = [i for i in ctx_ops if not ctx_dep[i]]
        attn_gen = [i for i in gen_ops if gen_dep[i]]
        d = deployment
        tokens = geometric_grid(1, max(d.max_num_tokens + d.max_num_seqs, 2), _PER_OCTAVE)
        news = geometric_grid(1, max(d.max_num_tokens, 2), _PER_OCTAVE)
        contexts = [0] + geometric_grid(1, max(d.max_context_tokens, 2), _PER_OCTAVE)
        batches = geometric_grid(1, max(d.max_num_seqs, 2), _PER_OCTAVE)

        def total(values) -> float:
            return sum(v[1] for v in values) * _MS

        non_attention = [total(engine.evaluate_context_ops(rest_ctx, 1, t, 0, 1.0, None)) for t in tokens]
        chunk = [[total(engine.evaluate_context_ops(attn_ctx, 1, n, p, 1.0, None)) if attn_ctx else 0.0 for p in contexts]
                 for n in news]
        decode_attention = [[total(engine.evaluate_generation_ops(attn_gen, b, max(c, 1), 1.0, 0, None)) if attn_gen else 0.0
                             for c in contexts] for b in batches]
        # decode_step_latency times one step at context isl + osl // 2 + 1; osl = 1 gives isl + 1.
        decode = [[engine.decode_step_latency(b, max(c, 1) - 1, 1, 1.0) * _MS for c in contexts] for b in batches]
    except Exception as exc:  # missing data surfaces only when a query reaches it
        raise TimingDataUnavailable(f"{PACKAGE} lacks data for {deployment.describe()}: {_short(exc)}") from None
    bad = [name for name, grid in (("decode", decode), ("chunk", chunk)) if not np.all(np.isfinite(grid)) or np.min(grid) < 0]
    if bad or not np.all(np.isfinite(non_attention)) or max(non_attention) <= 0:
        raise TimingDataUnavailable(f"{PACKAGE} returned invalid step times for {deployment.describe()}")
    implausible = _implausible(batches, decode)
    if implausible:
        raise TimingDataUnavailable(f"{PACKAGE} data for {deployment.describe()} is implausible: {implausible}")
    provenance = f"{PACKAGE} {package_version()} ({d.system}/{d.backend} {d.backend_version or 'current'} database)"
    decode, jitter = _non_decreasing_in_batch(decode)
    if jitter > 1.0 + 1e-9:
        provenance += f"; decode steps made non-decreasing in the batch (measurement jitter up to {jitter:.2f}x)"
    return StepTables(tokens, news, contexts, batches, non_attention, chunk, decode_attention, decode, provenance)


#: A decode step this many times faster than a smaller batch's at the same context is not
#: jitter: the data are wrong (see :func:`_implausible`).
IMPLAUSIBLE_DROP = 1.5


def _implausible(batches: list[int], decode: list[list[float]]) -> str | None:
    """Why a decode table cannot be a real engine's, or None.

    A decode step reads the weights once whatever the batch and adds per-sequence work, so at a
    fixed context its time cannot fall as the batch grows. Measured per-kernel data do wiggle by
    a few to some tens of percent where the kernel configuration changes with the batch (seen up
    to 1.4x in the dense-model databases, smoothed by :func:`_non_decreasing_in_batch`); a batch
    that is :data:`IMPLAUSIBLE_DROP` times faster than a smaller one (DeepSeek-V3 on gb300 with
    vLLM: about 80 ms at batch 1, 2x that of batch 60) means the database filled a gap with
    estimates, and timing built on them would make small batches look slower than large ones.
    """
    grid = np.asarray(decode)  # seconds
    for j in range(grid.shape[1]):
        column = grid[:, j]
        for i in range(1, len(column)):
            if column[i] * IMPLAUSIBLE_DROP < column[: i].max():
                return (f"a decode step of {batches[i]} sequences takes {column[i] * 1e3:.2f} ms, less than the "
                        f"{column[: i].max() * 1e3:.2f} ms of a smaller batch")
    return None


def _non_decreasing_in_batch(decode: list[list[float]]) -> tuple[list[list[float]], float]:
    """``decode`` with each step at least as long as any smaller batch's at the same context
    (the running maximum over the batch axis), and the largest factor that lifted a value."""
    grid = np.asarray(decode, dtype=float)
    lifted = np.maximum.accumulate(grid, axis=0)
    jitter = float(np.max(lifted / grid)) if grid.size else 1.0
    return lifted.tolist(), jitter


def _count_ops(evaluate_one) -> int:
    """Number of operations in a phase: the engine rejects the first index out of range."""
    count = 0
    while count < 512:
        try:
            evaluate_one(count)
        except ValueError as exc:
            if "out of range" in str(exc):
                return count
            raise
        count += 1
    return count


def _rules_digest() -> str:
    """Digest of this module's source: the build's checks (missing data, implausible tables)
    live here, so a recorded refusal is only trusted by the code that made it."""
    global _RULES_DIGEST
    if _RULES_DIGEST is None:
        _RULES_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return _RULES_DIGEST


_RULES_DIGEST: str | None = None


def _unavailable_path(deployment: Deployment, version: str) -> Path:
    return cache_dir() / f"{deployment.key(version)}-{_rules_digest()}.unavailable"


def _recorded_refusal(path: Path) -> TimingDataUnavailable | None:
    try:
        message = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return TimingDataUnavailable(message) if message else None


def _record_refusal(path: Path, exc: TimingDataUnavailable) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(str(exc))
        os.replace(tmp, path)
    except OSError:  # a read-only cache directory only costs the failed build next time
        pass


def load_or_build(deployment: Deployment) -> StepTables:
    """The cached tables of ``deployment``, built and cached on first use.

    A deployment the databases cannot time is recorded too (a ``.unavailable`` file holding the
    message, keyed also by this module's source) and raises the same TimingDataUnavailable
    without compiling the engine again: compiling and probing a deployment that then fails costs
    about a second per run, e.g. the FP8-attention attempt before the nearest-precision
    substitution of the default scenario."""
    version = package_version()
    if version is None:
        raise TimingDataUnavailable(f"{PACKAGE} is not installed")
    path = cache_dir() / f"{deployment.key(version)}.npz"
    if path.exists():
        try:
            return StepTables.load(path)
        except Exception:  # a truncated or foreign file: rebuild it
            pass
    refusal_path = _unavailable_path(deployment, version)
    refusal = _recorded_refusal(refusal_path)
    if refusal is not None:
        raise refusal
    try:
        tables = build_tables(deployment)
    except TimingDataUnavailable as exc:
        _record_refusal(refusal_path, exc)
        raise
    try:
        tables.save(path)
    except OSError:  # a read-only cache directory only costs the rebuild next time
        pass
    return tables
