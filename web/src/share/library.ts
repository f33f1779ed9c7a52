// Where the library itself is found, for the Share dialog: the Python
// package's name (pyproject.toml's [project] name) and its PyPI page.
export const LIBRARY = {
  name: 'nansense',
  install: 'pip install nansense',
  url: 'https://pypi.org/project/nansense/',
} as const;
