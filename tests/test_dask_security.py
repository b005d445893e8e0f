"""A locked-down Dask: the local cluster speaks TLS with a temporary certificate, and a plain
tcp:// scheduler is refused unless asked for (results travel as pickles)."""

from __future__ import annotations

import pytest

from agentsim.errors import InputError
from agentsim.experiments.executors import DASK_INSECURE_ENV, DaskExecutor


def test_a_plain_tcp_scheduler_is_refused_without_the_opt_in(monkeypatch):
    monkeypatch.delenv(DASK_INSECURE_ENV, raising=False)
    with pytest.raises(InputError, match="not encrypted or authenticated") as info:
        DaskExecutor("tcp://127.0.0.1:1")
    assert info.value.source == "--dask" and DASK_INSECURE_ENV in info.value.message


def test_the_opt_in_lets_a_tcp_address_through_to_the_connection(monkeypatch):
    monkeypatch.setenv(DASK_INSECURE_ENV, "1")
    with pytest.raises(InputError, match="cannot connect to the Dask scheduler"):
        DaskExecutor("tcp://127.0.0.1:1")  # nothing listens there: refused by the network, not by us


@pytest.mark.slow
def test_local_cluster_uses_tls_and_refuses_a_client_without_the_certificate():
    from dask.distributed import Client

    executor = DaskExecutor("local", workers=1)
    try:
        address = executor.cluster.scheduler_address
        assert address.startswith("tls://")
        assert executor.client.submit(sum, [1, 2, 3]).result() == 6  # the sweep's own client works
        with pytest.raises(Exception):
            Client(address, timeout="5s")  # another local process, without the temporary certificate
    finally:
        executor.close()
