"""One measurement: the trial's child process and its failure kinds, the timed window, the
workload, the stage profile, the host lock and Ctrl-C."""
