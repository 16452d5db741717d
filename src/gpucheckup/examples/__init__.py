"""Runnable pathologies: small training scripts, each bound by one thing, with a flag per fix.

Run one on your own GPU (`python -m gpucheckup.examples.launch`), check it up
(`gpucheckup run -- python -m gpucheckup.examples.launch`), then measure a fix with
`gpucheckup ab -- python -m gpucheckup.examples.launch -- python -m gpucheckup.examples.launch --fused`.
Every script also runs on a CPU at small sizes (the tests run them there). `gpucheckup examples`
lists them with their flags.
"""

NAMES = ("moe", "input", "launch", "sync", "copies", "comm")
