"""Clocks and the limits they are read against: GPU time, noise, rooflines, and what
measured a number."""
