"""What measures the platform and its storage, apart from any server: the platform record (`platform_probe`,
evidence R4), the page cache (`pagecache`), fio's direct reads (`fio`), one LMCache fs L2 worker's cold loads
(`coldread`, run in its own Python with a given LMCache build first on the path), checkpoint saves (`ckptsave`).
"""
