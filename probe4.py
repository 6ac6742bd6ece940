import asyncio, sys, nats
async def main():
    nc = await nats.connect("nats://127.0.0.1:14224", user="s", password="s", allow_reconnect=False)
    for s in ["$JS.API.INFO","$JS.API.STREAM.CREATE.X","$JS.API.STREAM.NAMES","$JS.API.STREAM.LIST","$JS.API.STREAM.INFO.X","$JS.API.STREAM.MSG.GET.X","$JS.API.CONSUMER.INFO.X.C","$JS.API.CONSUMER.CREATE.X.C","$JS.API.CONSUMER.NAMES.X","$JS.API.CONSUMER.MSG.NEXT.X.C","$JS.API.DIRECT.GET.X","$JS.API.FOO", "x.y"]:
        try:
            m = await nc.request(s, b'{"name":"X","subjects":["x"]}' if "CREATE" in s else b"", timeout=1); print(s, m.data[:200])
        except Exception as e: print(s, repr(e))
    await nc.close()
asyncio.run(main())
