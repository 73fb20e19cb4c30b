// An Express app whose /metrics serves prom-client's registry and tollgate's counts together
// (run: node examples/prom-client.js, then curl localhost:3000/metrics). tollgate's text is
// the core's rendering (tollgate/metrics) under its own names, appended to the registry's:
// one scrape, one exposition, no metric named twice.
import express from "express";
import { Registry, collectDefaultMetrics } from "prom-client";
import { Limiter } from "tollgate";
import { rateLimit } from "tollgate/express";
import { prometheus } from "tollgate/metrics";

/** The app, its limiters and the prom-client registry (exported for the test). */
export function createApp() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const perIp = new Limiter("fixed-window 3/min", { name: "per-ip" });
  const login = new Limiter("fixed-window 1/min", { name: "login" });
  const app = express();
  app.use("/api", rateLimit({ limiter: perIp, route: "/api" }));
  app.get("/api", (req, res) => res.send("ok"));
  app.post("/login", rateLimit({ limiter: login, route: "/login" }), (req, res) => res.send("welcome"));
  app.get("/metrics", async (req, res) => {
    res.type(registry.contentType);
    res.send((await registry.metrics()) + prometheus([perIp, login]));
  });
  return { app, registry, limiters: [perIp, login] };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const port = Number(process.env.PORT ?? 3000);
  createApp().app.listen(port, () => console.log(`http://localhost:${port}/metrics`));
}
