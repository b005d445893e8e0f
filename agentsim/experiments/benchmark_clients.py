"""How the benchmark client behind a measured row drew its requests and what it averaged.

The rows of ``measured_runs.csv`` (aiconfigurator-core's ``silicon_sample.csv``) come from two
benchmark harnesses, told apart by ``silicon_data_source``:

* **aiconfigurator's own eval harness** (``aiconfigurator eval``; the rows whose source is an
  ``aic-auto-gap-analysis`` export). It runs genai-perf/aiperf with
  ``--synthetic-input-tokens-stddev 0 --output-tokens-stddev 0``, ``min_tokens = max_tokens =
  osl`` and ``ignore_eos`` (or SGLang's ``bench_serving`` with ``--random-range-ratio 1``): every
  request has exactly ``isl`` input and ``osl`` output tokens. ``--warmup-request-count 2c``
  requests run first, then ``--request-count 10c`` are measured (``c`` = concurrency). It
  generates ``--num-dataset-entries 12c`` prompts, and aiperf (0.3.0 and later, the releases of
  the harness's last months) draws them without replacement by default (``SHUFFLE``), so no
  prompt is sent twice and a prefix cache never hits.
* **InferenceX's sweep** (every other row: the 1k/1k, 1k/8k and 8k/1k shapes, engine images by
  tag). ``benchmarks/benchmark_lib.sh`` runs ``utils/bench_serving/benchmark_serving.py
  --dataset-name random --random-range-ratio 0.8 --ignore-eos --num-prompts 10c
  --max-concurrency c --request-rate inf`` (the ratio is the workflows' default,
  ``RANDOM_RANGE_RATIO: 0.8``). That script draws every request's input *and* output length
  uniformly from the integers ``[int(0.8 L), L]`` (``np.random.randint(int(L * ratio), L + 1)``),
  so with ``ignore_eos`` the requests end at different steps and the closed-loop clients do not
  stay in lock-step. Warm-up requests (``--num-warmups 2c``, one test prompt before that option
  existed) complete before the measured run starts; all ``10c`` measured requests are averaged,
  the first burst of ``c`` requests included.

Both harnesses therefore measure ``10c`` requests starting with all ``c`` clients sending at
once; they differ in the length distribution. :func:`client_protocol` says which applies to a
row; :func:`length_spec` turns a length and the protocol into the workload's distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Requests measured per client by both harnesses (``--request-count`` / ``--num-prompts`` 10c).
MEASURED_REQUESTS_PER_CLIENT = 10
#: InferenceX's ``RANDOM_RANGE_RATIO`` (the lower bound of a drawn length, as a fraction of it).
INFERENCEX_RANGE_RATIO = 0.8
#: ``silicon_data_source`` marker of rows measured by aiconfigurator's eval harness.
_AIC_EVAL_MARKER = "aic-auto-gap-analysis"


@dataclass(frozen=True)
class ClientProtocol:
    """A benchmark client's request lengths and averaging.

    ``length_low_fraction``: every request length is drawn uniformly from the integers
    ``[int(fraction * L), L]`` (1.0: exactly ``L``). ``measured_per_client``: the mean is over the
    first ``measured_per_client * clients`` requests of the run, the initial burst included."""

    tool: str
    length_low_fraction: float
    measured_per_client: int = MEASURED_REQUESTS_PER_CLIENT


FIXED_LENGTHS = ClientProtocol("aiconfigurator eval (genai-perf / aiperf, fixed lengths)", 1.0)
INFERENCEX = ClientProtocol("InferenceX benchmark_serving.py (--random-range-ratio 0.8)", INFERENCEX_RANGE_RATIO)


def client_protocol(row: dict) -> ClientProtocol:
    """The benchmark client that measured ``row``, from its ``silicon_data_source``."""
    source = str(row.get("silicon_data_source") or "")
    return FIXED_LENGTHS if _AIC_EVAL_MARKER in source else INFERENCEX


def length_spec(tokens: int, protocol: ClientProtocol) -> int | dict:
    """The workload distribution of a request length of ``tokens`` under ``protocol``: the
    constant itself, or a uniform draw over the integers ``[int(fraction * tokens), tokens]``
    (a continuous uniform over the half-open integer cells, rounded: each integer equally
    likely, as ``np.random.randint`` draws them)."""
    low = int(tokens * protocol.length_low_fraction)
    if low >= tokens:
        return tokens
    return {"dist": "uniform", "low": low - 0.5, "high": tokens + 0.5, "round": True,
            "min": max(low, 1), "max": tokens}
