"""Board glue: a byte link to the host and the loop that drives the agent.

UartLink wraps machine.UART on a board; PtyLink opens a pty or tty path on the unix
port (raw mode via termios). run() moves bytes between the link and the agent
through one preallocated buffer and polls the agent's timers.
"""

import time


class UartLink:
    def __init__(self, uart_id: int = 0, baudrate: int = 115200, **kw) -> None:
        import machine

        self.uart = machine.UART(uart_id, baudrate=baudrate, **kw)

    def write(self, data) -> None:
        self.uart.write(data)  # pyright: ignore[reportAttributeAccessIssue]

    def readinto(self, buf, timeout_ms: int) -> int:
        if not self.uart.any():  # pyright: ignore[reportAttributeAccessIssue]
            time.sleep_ms(timeout_ms if timeout_ms < 2 else 1)
            return 0
        n = self.uart.readinto(buf)  # pyright: ignore[reportAttributeAccessIssue]
        return n or 0


class PtyLink:
    """A pty or tty on the unix port: a path, or an inherited file descriptor number."""

    def __init__(self, path) -> None:
        import select
        import termios

        self.f = open(path, "r+b")
        fd = self.f.fileno()
        termios.setraw(fd)
        self.poller = select.poll()
        self.poller.register(self.f, select.POLLIN)
        self._pollin = select.POLLIN
        self._one = bytearray(1)

    def write(self, data) -> None:
        self.f.write(data)

    def readinto(self, buf, timeout_ms: int) -> int:
        """Bytes now readable (at most len(buf)), waiting up to timeout_ms."""
        n = 0
        one = self._one
        t = timeout_ms
        while n < len(buf) and self.poller.poll(t):
            if not self.f.readinto(one):  # a blocking read of one byte into a fixed buffer
                break
            buf[n] = one[0]
            n += 1
            t = 0
        return n


def run(agent, link, rx_size: int = 256, until=None) -> None:
    """Feed the link into the agent and poll its timers, forever (or until until())."""
    buf = bytearray(rx_size)
    mv = memoryview(buf)
    agent.start()
    while until is None or not until():
        n = link.readinto(buf, 2)
        if n:
            agent.input(mv[0:n])
        agent.poll()
