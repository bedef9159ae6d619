#!/usr/bin/env node
import { main } from './cli/program.js';

const code = await main(process.argv.slice(2));
// `serve` runs until a signal; every other command (or a serve that failed to start) ends here.
if (code !== 0 || process.argv[2] !== 'serve') process.exit(code);
