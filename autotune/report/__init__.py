"""What a study hands back: best.yaml's figures, report.md with its plots and importances, the
dashboard note, and the benchmark's results."""
