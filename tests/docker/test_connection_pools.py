"""The unix-socket client's bounded connection pools: an evicted pool stays usable by a thread that
already holds it (no daemon needed)."""

import pytest

urllib3 = pytest.importorskip("urllib3")


class _IdleConnection:
    closed = False

    def close(self):
        self.closed = True


def test_an_evicted_pool_closes_its_idle_sockets_but_still_serves_the_thread_that_holds_it():
    from urllib3.connectionpool import HTTPConnectionPool

    from sopgym.sandboxes.docker.pool import _close_idle_connections

    pool = HTTPConnectionPool("localhost", maxsize=3)
    idle = _IdleConnection()
    pool.pool.get(block=False)  # a slot, as a connection taken and given back would fill it
    pool.pool.put(idle, block=False)
    _close_idle_connections(pool)
    assert idle.closed
    assert pool.pool is not None and pool.pool.qsize() == 3  # open, every slot kept
    conn = pool._get_conn()  # raised urllib3's ClosedPoolError ("Pool is closed") when disposal closed the pool
    assert conn is not idle


def test_the_bounded_pools_dispose_with_it():
    docker = pytest.importorskip("docker")

    from sopgym.sandboxes.docker.pool import _NUM_POOLS, _bound_pools, _close_idle_connections

    api = docker.APIClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    _bound_pools(api)
    pools = api._custom_adapter.pools
    assert pools._maxsize == _NUM_POOLS and pools.dispose_func is _close_idle_connections
