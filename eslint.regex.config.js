// Only the regular-expression complexity checks (docs/decisions.md, "Linear-time input"): no
// pattern in the code may backtrack super-linearly. General lint rules are deliberately not on.
import tsParser from '@typescript-eslint/parser';
import regexp from 'eslint-plugin-regexp';

export default [
  {
    files: ['api/**/*.{ts,js}', 'lib/**/*.{ts,js}', 'tasks/**/*.{ts,js}', 'bin/**/*.{ts,js}', 'workers/**/*.{ts,js}'],
    languageOptions: { parser: tsParser, ecmaVersion: 'latest', sourceType: 'module' },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    plugins: { regexp },
    rules: {
      'regexp/no-super-linear-backtracking': 'error',
      'regexp/no-super-linear-move': 'error',
    },
  },
];
