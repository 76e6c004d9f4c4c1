"""A real S3 protocol server on loopback for the Security Lake tests (moto's server
mode, from PyPI): bound to a port the system picks, which it prints as its first
line; it runs until its standard input closes (the test that started it ended)."""

import sys

from moto.server import ThreadedMotoServer

server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()
server.stop()
