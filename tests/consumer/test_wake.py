import asyncio

from infinistream.consumer.wake import Wake


async def test_wait_returns_at_once_when_set() -> None:
    wake = Wake()
    wake.set()
    assert await wake.wait(10.0)


async def test_wait_times_out_unset() -> None:
    wake = Wake()
    assert not await wake.wait(0.01)
    assert not wake.is_set()


async def test_set_releases_a_waiter() -> None:
    wake = Wake()
    waiting = asyncio.get_running_loop().create_task(wake.wait(10.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    wake.set()
    assert await waiting


async def test_clear_makes_the_next_wait_block() -> None:
    wake = Wake()
    wake.set()
    wake.clear()
    assert not await wake.wait(0.01)


async def test_cancelled_wait_leaves_no_waiter_behind() -> None:
    wake = Wake()
    waiting = asyncio.get_running_loop().create_task(wake.wait())
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    wake.set()  # must not touch the cancelled future
    assert await wake.wait(0.01)
