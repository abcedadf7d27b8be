"""``python -m chaos.extra.toxiproxy [-host H] [-port P] [-config FILE] [-seed N] [-version]``: serve the
Toxiproxy API until stopped; the options are toxiproxy-server's (one dash or two)."""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
from pathlib import Path

from chaos.extra.toxiproxy.server import VERSION, ToxiproxyServer


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m chaos.extra.toxiproxy", description=__doc__)
    ap.add_argument("-host", "--host", default="127.0.0.1", help="address of the API (default 127.0.0.1)")
    ap.add_argument("-port", "--port", type=int, default=8474, help="port of the API (0: any free one)")
    ap.add_argument("-config", "--config", help="JSON file of proxies to create at start (as /populate)")
    ap.add_argument("-seed", "--seed", type=int, help="seed of the toxicity and jitter draws")
    ap.add_argument("-version", "--version", action="store_true", help="print the version and exit")
    args = ap.parse_args()
    if args.version:
        print(VERSION)
        return
    if args.seed is not None:
        random.seed(args.seed)
    server = ToxiproxyServer(args.host, args.port)

    async def run() -> None:
        await server.serve()
        if args.config:
            try:
                raw = Path(args.config).read_bytes()
            except OSError as e:
                print(f"config {args.config}: {e.strerror}", file=sys.stderr, flush=True)
            else:
                resp = await server.api.populate(raw)
                if resp.status >= 400:
                    print(f"config {args.config}: {resp.body.decode().strip()}", file=sys.stderr, flush=True)
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
