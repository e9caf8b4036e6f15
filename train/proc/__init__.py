"""Process plumbing the sweeper starts: `probe` (what this machine offers, as JSON), `zygote` (a
preloaded process that forks trials) and `deathsig` (children die with their parent).
"""
