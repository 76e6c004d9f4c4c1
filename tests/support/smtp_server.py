#!/usr/bin/env python3
"""A real SMTP server (aiosmtpd) for driftwatch's e-mail tests.

Usage:
  smtp_server.py --port N --spool DIR [--mode plain|starttls|implicit]
                 [--cert FILE --key FILE] [--user U --password P]

Accepted messages are written to DIR as <n>.eml. What it does depends on the
recipient's local part:
  permfail*       550 (permanent) at RCPT
  tempfail-once*  451 (transient) the first time the address is seen, then accepted
  slow-once*      the first DATA for the address waits 3 s before answering
Prints "ready" on stdout once it listens.
"""
import argparse
import asyncio
import os
import ssl
import sys
import time

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Handler:
    def __init__(self, spool):
        self.spool = spool
        self.count = 0
        self.tempfailed = set()
        self.slowed = set()

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        local = address.split("@")[0]
        if local.startswith("permfail"):
            return "550 5.1.1 mailbox unavailable"
        if local.startswith("tempfail-once") and address not in self.tempfailed:
            self.tempfailed.add(address)
            return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        for r in envelope.rcpt_tos:
            if r.split("@")[0].startswith("slow-once") and r not in self.slowed:
                self.slowed.add(r)
                await asyncio.sleep(3)
        self.count += 1
        path = os.path.join(self.spool, "%06d.eml" % self.count)
        with open(path + ".tmp", "wb") as f:
            f.write(("X-Envelope-To: %s\r\n" % ", ".join(envelope.rcpt_tos)).encode())
            f.write(envelope.original_content or envelope.content)
        os.rename(path + ".tmp", path)
        return "250 Message accepted for delivery"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--spool", required=True)
    p.add_argument("--mode", default="plain", choices=["plain", "starttls", "implicit"])
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--user")
    p.add_argument("--password")
    a = p.parse_args()

    kwargs = {}
    ctx = None
    if a.mode != "plain":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(a.cert, a.key)
    if a.user:
        def authenticator(server, session, envelope, mechanism, auth_data):
            ok = isinstance(auth_data, LoginPassword) and auth_data.login.decode() == a.user and auth_data.password.decode() == a.password
            return AuthResult(success=ok)
        kwargs.update(authenticator=authenticator, auth_required=True, auth_require_tls=(a.mode != "plain"))
    if a.mode == "starttls":
        kwargs.update(tls_context=ctx, require_starttls=True)
        controller = Controller(Handler(a.spool), hostname="127.0.0.1", port=a.port, **kwargs)
    elif a.mode == "implicit":
        controller = Controller(Handler(a.spool), hostname="127.0.0.1", port=a.port, ssl_context=ctx, server_hostname="localhost", **kwargs)
    else:
        controller = Controller(Handler(a.spool), hostname="127.0.0.1", port=a.port, **kwargs)
    controller.start()
    print("ready", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        controller.stop()


if __name__ == "__main__":
    sys.exit(main())
