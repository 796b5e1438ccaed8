"""A TCP proxy a test can cut: a stand-in for a server that goes away and comes back.

``stop`` closes the listening socket and every open connection (clients see their connections
reset and new ones refused, as while a database restarts); ``start`` listens again on the same port.
"""

import contextlib
import socket
import threading

from tests.live import free_port


class TcpProxy:
    def __init__(self, *, target_host: str, target_port: int) -> None:
        self.port = free_port()
        self._target = (target_host, target_port)
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            open_sockets = [*self._sockets, *([self._listener] if self._listener else [])]
            self._sockets.clear()
            self._listener = None
        for open_socket in open_sockets:
            with contextlib.suppress(OSError):
                open_socket.shutdown(socket.SHUT_RDWR)
            open_socket.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _address = listener.accept()
            except OSError:
                return  # stopped
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
            for source, destination in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, destination), daemon=True).start()

    def _pipe(self, source: socket.socket, destination: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                destination.sendall(data)
        for either in (source, destination):
            with contextlib.suppress(OSError):
                either.shutdown(socket.SHUT_RDWR)
