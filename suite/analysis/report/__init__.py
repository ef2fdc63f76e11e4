"""Reports: plots, findings and hardware comparisons built from results files only."""
