#!/usr/bin/env python3
"""upper.py - an etlstage T-worker with the Python SDK: uppercases every message.

Modes: single, batch supervisor-driven, batch worker-driven (BNC) - the SDK speaks all
of them; this file only says what to do with a batch.  Markers and mode come from the
ETLSTAGE_* environment.  ``bytes.upper`` changes ASCII a-z only, like the C, Node and
shell versions next to this file.

Try:  printf 'hello\\n' | ETLSTAGE_TYPE=T ETLSTAGE_MODE=single python upper.py | od -c
"""

from __future__ import annotations

import logging

from etlstage.worker import Transformer, main

log = logging.getLogger("upper")


class Upper(Transformer):
    def setup(self) -> None:
        sc = self.scenario
        log.info("mode=%s batch_size=%d driver=%s", sc.mode, sc.batch_size, sc.batch_driver)

    def process(self, messages: list[bytes]) -> list[bytes]:
        return [m.upper() for m in messages]


if __name__ == "__main__":
    main(Upper(), app="upper")
