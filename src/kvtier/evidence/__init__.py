"""What turns readings into pages: the published readings (`published`), per-item figures (`r1`, `r2`,
`r2_local`, `r3`, with `measured` for the tier tables measured here), shared table maths (`tables`), conditions
text (`conditions`), charts (`charts`), CSV files (`files`), notebook rendering (`render`), the index and the
catalog (`index`, `catalog`), and the maintainers' notebook sync (`notebooks`). Computes; the notebooks show."""
