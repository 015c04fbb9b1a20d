"""
Implementation of `tailkit.config`: the plan model, its YAML reader, validator and writer.

`tailkit.config` re-exports the public names; other packages import them from there.
"""

from tailkit._config._dump import dump_plan as dump_plan
from tailkit._config._load import load_plan as load_plan
from tailkit._config._load import parse_plan as parse_plan
from tailkit._config._model import ACTIONS as ACTIONS
from tailkit._config._model import PLAN_VERSION as PLAN_VERSION
from tailkit._config._model import SIGNALS as SIGNALS
from tailkit._config._model import Basis as Basis
from tailkit._config._model import LiveRouting as LiveRouting
from tailkit._config._model import Plan as Plan
from tailkit._config._model import PlanInterval as PlanInterval
from tailkit._config._model import PlanPrediction as PlanPrediction
from tailkit._config._model import Route as Route
from tailkit._config._model import Shared as Shared
from tailkit._config._model import Step as Step
from tailkit._config._model import StepInterval as StepInterval
from tailkit._config._model import StepPrediction as StepPrediction
from tailkit._config._model import Tokens as Tokens
from tailkit._config._scale import scale_plan as scale_plan
from tailkit._config._write import write_plan as write_plan
from tailkit._config._yaml import safe_load_bounded as safe_load_bounded
