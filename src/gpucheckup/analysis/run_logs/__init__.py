"""The run's own logs: step times (steps.csv), NVML samples, the environment, host samples."""
