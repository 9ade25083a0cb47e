"""The gated joint test of document 000: G1 arrival acceptance, G2 single-node baseline, G3 main gate (G4, the soak,
comes later). Each gate turns what the probes and runs measured into PASS/FAIL lines and one verdict record.

One module per gate: `bom` checks the platform record against a bill of materials (G1), `g2` judges the
baseline's repetitions (stable, over a floor), `g3` judges a candidate tier against a baseline by intervals.
"""
