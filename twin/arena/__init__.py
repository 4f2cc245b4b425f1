"""The arena: agent line-ups over scenarios and seeds as real gateway sessions, ranked with
confidence intervals against a paired baseline."""
