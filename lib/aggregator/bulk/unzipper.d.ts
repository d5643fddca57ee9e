/** The part of unzipper (the ZIP reader exceljs streams with) that xlsx-parts.ts uses; the package ships no typings. */
declare module 'unzipper' {
  import type { Duplex } from 'node:stream';
  const unzipper: { Parse(options?: { forceStream?: boolean }): Duplex };
  export default unzipper;
}
