// A small static server for the demo page and the browser tests, on 127.0.0.1 only.
// Serves web/ at /web/ (the page, its worker and its wasm package), the shipped models at
// /models/ and the golden fixtures at /fixtures/ (crates/wgemma/tests/data/golden); nothing
// else of the repository.
//   node tools/browser/serve.mjs [--port N]   (default 8080; 0 picks a free port)
import { createServer } from 'node:http';
import { createReadStream, statSync } from 'node:fs';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const mounts = {
  '/web/': join(repoRoot, 'web'),
  '/models/': join(repoRoot, 'models'),
  '/fixtures/': join(repoRoot, 'crates/wgemma/tests/data/golden'),
};
const types = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.ts': 'text/plain; charset=utf-8',
};

/** The file a URL path maps to, or null (outside the mounts, or `..` tricks). */
function resolvePath(urlPath) {
  for (const [prefix, dir] of Object.entries(mounts)) {
    if (!urlPath.startsWith(prefix)) continue;
    let rel = decodeURIComponent(urlPath.slice(prefix.length));
    if (rel === '' || rel.endsWith('/')) rel += 'index.html';
    const file = normalize(join(dir, rel));
    return file.startsWith(dir + sep) ? file : null;
  }
  return null;
}

/** `extraMounts`: more URL prefix -> directory pairs (the tests serve a temp dir). */
export function startServer(port = 8080, extraMounts = {}) {
  Object.assign(mounts, extraMounts);
  const server = createServer((req, res) => {
    const path = new URL(req.url, 'http://127.0.0.1').pathname;
    if (path === '/' || path === '/web') {
      res.writeHead(302, { Location: '/web/' }).end();
      return;
    }
    const file = resolvePath(path);
    let stat = null;
    try {
      stat = file && statSync(file);
    } catch {}
    if (!stat || !stat.isFile()) {
      res.writeHead(404, { 'Content-Type': 'text/plain' }).end(`not found: ${path}\n`);
      return;
    }
    res.writeHead(200, {
      'Content-Type': types[extname(file)] ?? 'application/octet-stream',
      'Content-Length': stat.size,
      'Cache-Control': 'no-store',
    });
    if (req.method === 'HEAD') res.end();
    else createReadStream(file).pipe(res);
  });
  return new Promise((ok, fail) => {
    server.once('error', fail);
    server.listen(port, '127.0.0.1', () => ok(server));
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf('--port');
  const server = await startServer(i > 0 ? Number(process.argv[i + 1]) : 8080);
  const { port } = server.address();
  console.log(`wgemma demo: http://127.0.0.1:${port}/web/  (Ctrl-C stops)`);
  console.log(`  a golden fixture: http://127.0.0.1:${port}/web/?model=/fixtures/e2b_like&assistant=/fixtures/e2b_like_assistant`);
}
