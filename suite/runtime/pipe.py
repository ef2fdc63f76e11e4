"""An OS pipe whose two ends are each closed once, whichever side closes them first."""

from __future__ import annotations

import os


class Pipe:
    """A pipe's file descriptors (-1 once closed): closing an end twice is harmless."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()  # not inherited by anything exec'ed

    def close_write_end(self) -> None:
        """Close the write end: a reader sees EOF once every process holding it has too."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def close(self) -> None:
        self.close_write_end()
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
