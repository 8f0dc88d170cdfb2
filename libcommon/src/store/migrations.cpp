// The store's numbered schema migrations. Never edit a released migration: add a new one
// (version N+1) at the end. docs/store.md documents every table.
#include "migrations.hpp"

namespace rtx::store::detail {

// Timestamps: UTC ISO-8601 with milliseconds, e.g. 2025-01-31T12:00:00.123Z.
#define RTX_NOW "(strftime('%Y-%m-%dT%H:%M:%fZ','now'))"

static const char* const kSchemaV1 = R"SQL(
CREATE TABLE runs (
  id          INTEGER PRIMARY KEY,
  tool        TEXT NOT NULL,
  args_json   TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(args_json)),
  seed        INTEGER NOT NULL DEFAULT 0,
  started_at  TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  finished_at TEXT,
  status      TEXT NOT NULL DEFAULT 'running',
  git_sha     TEXT NOT NULL DEFAULT '',
  hw_sku      TEXT NOT NULL DEFAULT '',
  hw_json     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(hw_json))
);
CREATE INDEX runs_tool ON runs(tool, id);

CREATE TABLE artifacts (
  id         INTEGER PRIMARY KEY,
  run_id     INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  kind       TEXT NOT NULL,
  schema     TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  json       TEXT NOT NULL CHECK (json_valid(json))
);
CREATE INDEX artifacts_kind ON artifacts(kind, id);
CREATE INDEX artifacts_run ON artifacts(run_id);

CREATE TABLE doctor_reports (
  id         INTEGER PRIMARY KEY,
  run_id     INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  created_at TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  json       TEXT NOT NULL CHECK (json_valid(json))
);
CREATE INDEX doctor_reports_run ON doctor_reports(run_id);

CREATE TABLE bench_results (
  id           INTEGER PRIMARY KEY,
  run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  case_name    TEXT NOT NULL,
  op           TEXT NOT NULL,
  variant      TEXT NOT NULL,
  backend      TEXT NOT NULL,
  shape        TEXT NOT NULL,
  dtype        TEXT NOT NULL,
  params_json  TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(params_json)),
  median_s     REAL,
  p10_s        REAL,
  p90_s        REAL,
  mad_s        REAL,
  n            INTEGER NOT NULL DEFAULT 0 CHECK (n >= 0),
  ci_lo_s      REAL,
  ci_hi_s      REAL,
  gflops       REAL,
  gbps         REAL,
  checksum     INTEGER,
  samples_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(samples_json)),
  noisy        INTEGER NOT NULL DEFAULT 0 CHECK (noisy IN (0, 1)),
  created_at   TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(
);
CREATE INDEX bench_results_run ON bench_results(run_id, case_name);
CREATE INDEX bench_results_key ON bench_results(op, variant, backend, dtype, shape);

CREATE TABLE tuning_trials (
  id           INTEGER PRIMARY KEY,
  run_id       INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  op           TEXT NOT NULL,
  variant      TEXT NOT NULL,
  shape        TEXT NOT NULL,
  dtype        TEXT NOT NULL,
  backend      TEXT NOT NULL,
  sku          TEXT NOT NULL,
  config_json  TEXT NOT NULL CHECK (json_valid(config_json)),
  status       TEXT NOT NULL CHECK (status IN ('ok', 'skip', 'fail')),
  reason       TEXT,
  samples_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(samples_json)),
  median_s     REAL,
  created_at   TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  UNIQUE (op, variant, shape, dtype, backend, sku, config_json)
);
CREATE INDEX tuning_trials_run ON tuning_trials(run_id);

CREATE TABLE profiles (
  id                  INTEGER PRIMARY KEY,
  key                 TEXT NOT NULL,
  version             INTEGER NOT NULL CHECK (version >= 1),
  params_json         TEXT NOT NULL CHECK (json_valid(params_json)),
  measured_under_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(measured_under_json)),
  run_id              INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  created_at          TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  UNIQUE (key, version)
);

CREATE TABLE profile_current (
  key        TEXT PRIMARY KEY,
  version    INTEGER NOT NULL,
  updated_at TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  FOREIGN KEY (key, version) REFERENCES profiles(key, version)
);

CREATE TABLE proposals (
  id             INTEGER PRIMARY KEY,
  run_id         INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  key            TEXT NOT NULL,
  base_version   INTEGER,
  status         TEXT NOT NULL DEFAULT 'new',
  json           TEXT NOT NULL CHECK (json_valid(json)),
  content_sha256 TEXT,
  created_at     TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  updated_at     TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(
);
CREATE INDEX proposals_key ON proposals(key, id);
CREATE INDEX proposals_status ON proposals(status);

CREATE TABLE gate_results (
  id          INTEGER PRIMARY KEY,
  proposal_id INTEGER NOT NULL REFERENCES proposals(id) ON DELETE CASCADE,
  run_id      INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  gate        TEXT NOT NULL,
  passed      INTEGER NOT NULL CHECK (passed IN (0, 1)),
  metric      TEXT,
  value       REAL,
  threshold   REAL,
  detail_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail_json)),
  created_at  TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(
);
CREATE INDEX gate_results_proposal ON gate_results(proposal_id, gate);

CREATE TABLE promotions (
  id           INTEGER PRIMARY KEY,
  proposal_id  INTEGER REFERENCES proposals(id) ON DELETE SET NULL,
  key          TEXT NOT NULL,
  from_version INTEGER,
  to_version   INTEGER NOT NULL,
  action       TEXT NOT NULL CHECK (action IN ('promote', 'rollback')),
  actor        TEXT NOT NULL DEFAULT '',
  signature    TEXT,
  created_at   TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  FOREIGN KEY (key, to_version) REFERENCES profiles(key, version)
);
CREATE INDEX promotions_key ON promotions(key, id);
CREATE INDEX promotions_proposal ON promotions(proposal_id);

CREATE TABLE kg_nodes (
  id         INTEGER PRIMARY KEY,
  kind       TEXT NOT NULL,
  ref        TEXT NOT NULL,
  label      TEXT NOT NULL DEFAULT '',
  props_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(props_json)),
  created_at TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  UNIQUE (kind, ref)
);

CREATE TABLE kg_edges (
  id         INTEGER PRIMARY KEY,
  src        INTEGER NOT NULL REFERENCES kg_nodes(id) ON DELETE CASCADE,
  dst        INTEGER NOT NULL REFERENCES kg_nodes(id) ON DELETE CASCADE,
  kind       TEXT NOT NULL,
  props_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(props_json)),
  created_at TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  UNIQUE (src, dst, kind)
);
CREATE INDEX kg_edges_dst ON kg_edges(dst, kind);
)SQL";

// Version 2 (rtx-evolve): versioned configurations that are not kernel profiles (thread count,
// serve scheduler knobs, allocator knobs) and the log of every promotion/rollback of either kind.
static const char* const kSchemaV2 = R"SQL(
CREATE TABLE evolve_configs (
  id          INTEGER PRIMARY KEY,
  key         TEXT NOT NULL,
  version     INTEGER NOT NULL CHECK (version >= 1),
  config_json TEXT NOT NULL CHECK (json_valid(config_json)),
  proposal_id INTEGER REFERENCES proposals(id) ON DELETE SET NULL,
  created_at  TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  UNIQUE (key, version)
);

CREATE TABLE evolve_config_current (
  key        TEXT PRIMARY KEY,
  version    INTEGER NOT NULL,
  updated_at TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(,
  FOREIGN KEY (key, version) REFERENCES evolve_configs(key, version)
);

CREATE TABLE evolve_deployments (
  id           INTEGER PRIMARY KEY,
  proposal_id  INTEGER REFERENCES proposals(id) ON DELETE SET NULL,
  target       TEXT NOT NULL CHECK (target IN ('profile', 'config')),
  key          TEXT NOT NULL,
  from_version INTEGER,
  to_version   INTEGER,
  action       TEXT NOT NULL CHECK (action IN ('promote', 'rollback')),
  actor        TEXT NOT NULL DEFAULT '',
  signature    TEXT,
  created_at   TEXT NOT NULL DEFAULT )SQL" RTX_NOW R"SQL(
);
CREATE INDEX evolve_deployments_proposal ON evolve_deployments(proposal_id, id);
CREATE INDEX evolve_deployments_key ON evolve_deployments(key, id);
)SQL";

// Version 3 (rtx-bench host contention): whether a bench result was measured on a busy host
// (the artifact's cases[].host.contended and host.reason). Rows from before stay 0 and '':
// no evidence recorded, not "the host was idle".
static const char* const kSchemaV3 = R"SQL(
ALTER TABLE bench_results ADD COLUMN contended INTEGER NOT NULL DEFAULT 0 CHECK (contended IN (0, 1));
ALTER TABLE bench_results ADD COLUMN contention_reason TEXT NOT NULL DEFAULT '';
)SQL";

// Version 4 (rtx-tune host contention): whether a tuning trial's timing was taken on a busy
// host (tune::Evaluation::contended and its evidence). A contended trial is neither reused by a
// resume nor chosen as a search's best nor cited by rtx-evolve's tuner proposer. Rows from
// before stay 0 and '': no evidence recorded, not "the host was idle".
static const char* const kSchemaV4 = R"SQL(
ALTER TABLE tuning_trials ADD COLUMN contended INTEGER NOT NULL DEFAULT 0 CHECK (contended IN (0, 1));
ALTER TABLE tuning_trials ADD COLUMN contention_reason TEXT NOT NULL DEFAULT '';
)SQL";

#undef RTX_NOW

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> all = {
      {1, "initial schema: runs, artifacts, doctor, bench, tuning, profiles, evolve, knowledge graph", kSchemaV1},
      {2, "evolve: versioned configurations (threads, scheduler, allocator) and the deployment log", kSchemaV2},
      {3, "bench: host contention of each bench result (contended, contention_reason)", kSchemaV3},
      {4, "tune: host contention of each tuning trial (contended, contention_reason)", kSchemaV4},
  };
  return all;
}

const std::vector<std::string>& expected_tables() {
  static const std::vector<std::string> names = {
      "runs",     "artifacts",    "doctor_reports", "bench_results", "tuning_trials", "profiles",
      "profile_current", "proposals", "gate_results", "promotions",  "kg_nodes",      "kg_edges",
      "evolve_configs", "evolve_config_current", "evolve_deployments"};
  return names;
}

}  // namespace rtx::store::detail
