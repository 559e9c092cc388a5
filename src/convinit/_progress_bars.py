"""Progress bars in Jupyter without ipywidgets: tqdm.auto (the trainer's, and the Hub libraries') falls
back there to its text bar, which works, with a warning ("IProgress not found. Please update jupyter and
ipywidgets") that reads like an error to a newcomer. Imported first by the package, before anything
imports tqdm.auto; `pip install ipywidgets` gets the widget bars instead."""

import warnings

warnings.filterwarnings("ignore", message="IProgress not found")
