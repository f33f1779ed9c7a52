import { defineConfig } from 'vite';

// The demo (or any nansense program) to proxy /api and /ws to while running
// `npm run dev`; the built page is served by the C++ server itself.
const backend = process.env.NANSENSE_DEV_BACKEND ?? 'http://127.0.0.1:8080';

export default defineConfig({
  // Vite 8 transforms TSX with oxc; no preset plugin needed for Preact.
  oxc: {
    jsx: { runtime: 'automatic', importSource: 'preact' },
  },
  base: './',
  build: {
    // CMake passes --outDir <builddir>/web-dist; this is only the default.
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    target: 'es2022',
    // Everything ships inside the library: no inlined data URLs to reason
    // about, no sourcemaps to embed.
    assetsInlineLimit: 0,
    sourcemap: false,
    chunkSizeWarningLimit: 1024,
  },
  worker: { format: 'es' },
  server: {
    proxy: {
      '/api': { target: backend, changeOrigin: false },
      '/ws': { target: backend.replace(/^http/, 'ws'), ws: true },
    },
  },
});
