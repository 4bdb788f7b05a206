from .cronsim import CronSim as CronSim, CronSimError as CronSimError
