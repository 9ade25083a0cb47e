"""What drives measured runs into raw_data/runs/: one tier's cold-resume run on real servers (`tier_run`), a
campaign's tables from its tier runs (`campaign`: readings, attribution, correctness, conditions), R1's run
driver (`r1`: interleaved cold loads, fio, checkpoint saves, the L2 resume), and the rotated order of what a run
compares round after round (`order`). Raw records only: pages are made in kvtier.evidence."""
