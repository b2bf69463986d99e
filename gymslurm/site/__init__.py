"""The site a run is launched on: the scheduler (Slurm, or the embedded local backend), where jobs and
servers are placed, job arrays, the sbatch scripts and what is safe to write into them, and the doctor's
findings. Nothing here knows a run's decisions; the run's model (``launcher/``) stands on this.
"""
