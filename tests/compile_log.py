"""Test helper: collect jax's "Compiling ..." log records (to assert that a call does not recompile)."""

import logging

import jax


class CompileLog:
    """Context manager; ``.records`` holds the "Compiling ..." messages logged while active."""

    def __enter__(self):
        self.records, self._ctx = [], jax.log_compiles(True)
        outer = self

        class Handler(logging.Handler):
            def emit(self, rec):
                if "compiling" in rec.getMessage().lower():
                    outer.records.append(rec.getMessage())
        self._h, self._log = Handler(), logging.getLogger("jax")
        self._ctx.__enter__()
        self._log.addHandler(self._h)
        return self

    def __exit__(self, *exc):
        self._log.removeHandler(self._h)
        self._ctx.__exit__(*exc)
