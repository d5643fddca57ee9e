/** The texts bench/search.ts, bench/search-graph.ts and bench/search-cpu.ts search for (some misspelt, as users type them). */
export const TEXTS = ['veternary hospital', 'primary health centre', 'govt high school', 'gram panchayat office', 'milk collection centre',
  'bus stand', 'anganwadi', 'rice mill', 'grampanchyat', 'zilla parishad school', 'school', 'veterinary hospital', 'post office',
  'community hall', 'primary school', 'health sub centre', 'dispensry', 'market yard', 'railway station', 'police station'];
