"""The market: how one round's proposals, trades and placements become a committed allocation."""
