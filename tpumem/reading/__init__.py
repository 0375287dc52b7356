"""What the commands read: the paths they are given, as traces (XSpace profiles
imported on the way), and the analyses of many traces at once. Above the
analysis, below the reports: nothing here words or draws."""
