"""IPython extension of Hutch's code-interpreter-v1 template: the result
formats E2B's code interpreter adds to Jupyter's, so that its SDKs find
them where they look.

- e2b/data: a pandas DataFrame as {column: [values]} (the SDKs' `data`).
- e2b/chart: a matplotlib figure as E2B's chart description (the SDKs'
  `chart`), by E2B's own e2b-charts package.

Registered by type name, so pandas and matplotlib are imported by the code
that uses them, not at the kernel's start. Part of Hutch
(internal/template/recipes/code-interpreter-v1).
"""

import json

from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode


class _DataFormatter(BaseFormatter):
    format_type = Unicode("e2b/data")
    print_method = ObjectName("_repr_e2b_data_")
    _return_type = (dict, list, str)


class _ChartFormatter(BaseFormatter):
    format_type = Unicode("e2b/chart")
    print_method = ObjectName("_repr_e2b_chart_")
    _return_type = (dict,)

    def __call__(self, obj):
        # Not a type printer: IPython drops every formatter's printer for
        # Figure whenever matplotlib's inline backend is selected.
        if self.enabled and any(c.__module__ == "matplotlib.figure" and c.__name__ == "Figure" for c in type(obj).__mro__):
            return _figure(obj)
        return super().__call__(obj)


def _dataframe(df):
    # Through pandas' own JSON: timestamps, NaN and numpy scalars come out
    # as JSON can hold them.
    return {str(col): json.loads(df[col].to_json(orient="values", date_format="iso")) for col in df.columns}


def _figure(fig):
    from e2b_charts import chart_figure_to_dict

    try:
        # Its dict holds enums and tuples: made plain JSON here.
        return json.loads(json.dumps(chart_figure_to_dict(fig)))
    except Exception:  # a figure e2b-charts cannot describe: the PNG stays
        return None


def load_ipython_extension(ip):
    formatters = ip.display_formatter.formatters
    data = _DataFormatter(parent=ip.display_formatter)
    # pandas 3 names its module "pandas"; earlier ones, the defining one.
    data.for_type_by_name("pandas", "DataFrame", _dataframe)
    data.for_type_by_name("pandas.core.frame", "DataFrame", _dataframe)
    chart = _ChartFormatter(parent=ip.display_formatter)
    formatters["e2b/data"] = data
    formatters["e2b/chart"] = chart
    # The display formatter computes only its active types, which it took
    # from the formatters it had when it was made.
    active = ip.display_formatter.active_types
    for t in ("e2b/data", "e2b/chart"):
        if t not in active:
            active.append(t)
