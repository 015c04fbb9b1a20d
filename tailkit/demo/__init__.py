"""
The end-to-end demo: the whole tailkit loop on the bundled samples, in one call.

Ingest the samples, show the tail table, calibrate the sample workflow, replay the measured
tails with `tailkit serve` on loopback, run the workflow without and with the plan through the
executor and the OpenAI adapter, ingest the ledgers back, write the report, and compare.
"""

from tailkit.demo._demo import DemoResult as DemoResult
from tailkit.demo._demo import run_demo as run_demo


__all__ = ["DemoResult", "run_demo"]
