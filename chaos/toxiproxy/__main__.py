"""``python -m chaos.toxiproxy [--host H] [--port P]``: serve the Toxiproxy API until stopped."""

from __future__ import annotations

import argparse
import asyncio
import signal

from chaos.toxiproxy.server import ToxiproxyServer


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m chaos.toxiproxy", description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8474)
    args = ap.parse_args()
    server = ToxiproxyServer(args.host, args.port)

    async def run() -> None:
        await server.serve()
        print(f"statechaos toxiproxy API on {server.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.shutdown()

    asyncio.run(run())


if __name__ == "__main__":
    main()
