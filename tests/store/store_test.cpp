// Store tests: migrations, reopen, refusal of newer/corrupt/foreign files, unwritable paths,
// transactions, busy timeout, statements and the typed helpers.
#include <catch2/catch.hpp>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "rtx/core/error.hpp"
#include "rtx/store/store.hpp"
#include "test_util.hpp"
#include "../../libcommon/src/store/migrations.hpp"  // the released migrations, to build an older store

using rtx::Error;
using rtx::ErrorCategory;
using namespace rtx::store;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// Independent of the Store class: a plain sqlite3 query returning one integer.
int64_t raw_int(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  const int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

// The same for one text value (PRAGMA journal_mode).
std::string raw_text(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  const std::string v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

int64_t count_rows(Store& s, const std::string& table) {
  Statement& st = s.prepare("SELECT count(*) FROM " + table);
  REQUIRE(st.step());
  const int64_t n = st.column_int64(0);
  st.reset();
  return n;
}

// Expect `f` to throw rtx::Error of `cat` whose message contains every string in `parts`.
template <class F>
void expect_error(F&& f, ErrorCategory cat, std::vector<std::string> parts) {
  try {
    f();
    FAIL("expected rtx::Error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.category() == cat);
    for (auto& p : parts) CHECK(std::string(e.what()).find(p) != std::string::npos);
  }
}

struct EnvVar {  // set/unset an environment variable for one scope
  std::string name;
  std::optional<std::string> old;
  EnvVar(const std::string& n, const char* value) : name(n) {
    if (const char* o = std::getenv(n.c_str())) old = o;
    value ? setenv(n.c_str(), value, 1) : unsetenv(n.c_str());
  }
  ~EnvVar() { old ? setenv(name.c_str(), old->c_str(), 1) : unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("store path: --db wins, then RTX_HOME, then ./.rtx", "[cpu]") {
  {
    EnvVar e("RTX_HOME", nullptr);
    CHECK(default_db_path() == "./.rtx/rtx.db");
    CHECK(resolve_db_path("") == "./.rtx/rtx.db");
    CHECK(resolve_db_path("/x/y.db") == "/x/y.db");
  }
  {
    EnvVar e("RTX_HOME", "/tmp/h");
    CHECK(default_db_path() == "/tmp/h/rtx.db");
    CHECK(resolve_db_path("") == "/tmp/h/rtx.db");
    CHECK(resolve_db_path("a.db") == "a.db");
  }
  {
    EnvVar e("RTX_HOME", "/tmp/h/");
    CHECK(default_db_path() == "/tmp/h/rtx.db");
  }
  {
    EnvVar e("RTX_HOME", "");
    CHECK(default_db_path() == "./.rtx/rtx.db");
  }
}

TEST_CASE("store: migrations from empty create every table, WAL, foreign keys", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/home/sub/rtx.db";  // parents do not exist
  {
    Store s(path);
    CHECK(s.path() == path);
    CHECK(Store::latest_schema_version() >= 1);
    CHECK(s.schema_version() == Store::latest_schema_version());
    Statement& fk = s.prepare("PRAGMA foreign_keys");
    REQUIRE(fk.step());
    CHECK(fk.column_int64(0) == 1);
    fk.reset();
    Statement& sync = s.prepare("PRAGMA synchronous");
    REQUIRE(sync.step());
    CHECK(sync.column_int64(0) == 1);  // NORMAL
    sync.reset();
    CHECK(s.integrity_check() == std::vector<std::string>{"ok"});
  }
  CHECK(raw_int(path, "PRAGMA user_version") == Store::latest_schema_version());
  // journal_mode is persistent for WAL: a fresh plain connection reports it.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) == "wal");
  sqlite3_finalize(st);
  std::set<std::string> tables;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type='table'", -1, &st, nullptr) == SQLITE_OK);
  while (sqlite3_step(st) == SQLITE_ROW) tables.insert(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
  sqlite3_finalize(st);
  sqlite3_close(db);
  for (const char* t : {"runs", "artifacts", "doctor_reports", "bench_results", "tuning_trials", "profiles",
                        "profile_current", "proposals", "gate_results", "promotions", "kg_nodes", "kg_edges"})
    CHECK(tables.count(t) == 1);
}

TEST_CASE("store: a version 2 store migrates to 3; old bench rows read contended 0", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/v2.db";
  {  // a store as an rtx of schema 2 left it: migrations 1 and 2 only, with one bench row
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    for (const auto& m : rtx::store::detail::migrations())
      if (m.version <= 2) REQUIRE(sqlite3_exec(db, m.sql, nullptr, nullptr, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db,
                         "INSERT INTO runs (id, tool) VALUES (1, 'rtx-bench');"
                         "INSERT INTO bench_results (run_id, case_name, op, variant, backend, shape, dtype, median_s) "
                         "VALUES (1, 'old/case', 'gelu', 'cpu.ref', 'cpu', 'N=4', 'f32', 1e-3);"
                         "PRAGMA user_version = 2;",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  CHECK(raw_text(path, "PRAGMA journal_mode") == "delete");
  Store s(path);
  CHECK(s.schema_version() == Store::latest_schema_version());
  CHECK(Store::latest_schema_version() >= 3);
  CHECK(raw_text(path, "PRAGMA journal_mode") == "wal");  // switched once the store is accepted
  Statement& q = s.prepare("SELECT case_name, median_s, contended, contention_reason FROM bench_results");
  REQUIRE(q.step());
  CHECK(q.column_text(0) == "old/case");
  CHECK(q.column_double(1) == 1e-3);
  CHECK(q.column_int64(2) == 0);
  CHECK(q.column_text(3) == "");
  CHECK_FALSE(q.step());
  q.reset();
  // A contended row keeps 1 and its reason; anything but 0/1 is refused by the CHECK.
  s.exec("INSERT INTO bench_results (run_id, case_name, op, variant, backend, shape, dtype, contended, contention_reason) "
         "VALUES (1, 'new/case', 'gelu', 'cpu.ref', 'cpu', 'N=4', 'f32', 1, 'PSI cpu stall 38%')");
  CHECK(raw_int(path, "SELECT contended FROM bench_results WHERE case_name = 'new/case'") == 1);
  Statement& r = s.prepare("SELECT contention_reason FROM bench_results WHERE case_name = 'new/case'");
  REQUIRE(r.step());
  CHECK(r.column_text(0) == "PSI cpu stall 38%");
  r.reset();
  CHECK_THROWS_AS(s.exec("INSERT INTO bench_results (run_id, case_name, op, variant, backend, shape, dtype, contended) "
                         "VALUES (1, 'bad', 'gelu', 'cpu.ref', 'cpu', 'N=4', 'f32', 2)"),
                  Error);
}

TEST_CASE("store: reopen is idempotent and keeps data", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/rtx.db";
  int64_t id = 0;
  { 
    Store s(path);
    id = s.begin_run("rtx-test", "[\"a\"]", 7, "abc", "cpu", "{}");
  }
  const int64_t objects = raw_int(path, "SELECT count(*) FROM sqlite_master");
  for (int i = 0; i < 2; ++i) {
    Store s(path);
    CHECK(s.schema_version() == Store::latest_schema_version());
    auto r = s.get_run(id);
    REQUIRE(r);
    CHECK(r->tool == "rtx-test");
  }
  CHECK(raw_int(path, "SELECT count(*) FROM sqlite_master") == objects);
  CHECK(raw_int(path, "SELECT count(*) FROM runs") == 1);
}

TEST_CASE("store: read_only opens an existing store without writing; missing and older stores are refused", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string path = dir + "/rtx.db";
  StoreOptions ro;
  ro.read_only = true;
  {
    Store s(path);
    s.put_doctor_report(0, "{\"schema\":\"rtx.doctor.v1\",\"n\":7}");
  }
  const std::string before = slurp(path);
  REQUIRE_FALSE(std::filesystem::exists(path + "-wal"));  // the writer's close checkpointed it
  {
    Store s(path, ro);
    // Opened immutable: no -wal or -shm appears beside the store (a 0444 -shm would break
    // the next writer).
    CHECK_FALSE(std::filesystem::exists(path + "-wal"));
    CHECK_FALSE(std::filesystem::exists(path + "-shm"));
    CHECK(s.schema_version() == Store::latest_schema_version());
    CHECK(s.latest_doctor_report() == std::string("{\"schema\":\"rtx.doctor.v1\",\"n\":7}"));
    try {
      s.put_doctor_report(0, "{}");
      FAIL("a read-only store was written");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::Environment);
    }
  }
  CHECK(slurp(path) == before);
  CHECK_FALSE(std::filesystem::exists(path + "-shm"));
  {  // URI-special characters in the path are encoded, not read as URI syntax.
    const std::string odd = dir + "/a?b#c%41 d.db";
    {
      Store w(odd);
      w.put_doctor_report(0, "{\"n\":3}");
    }
    Store r(odd, ro);
    CHECK(r.latest_doctor_report() == std::string("{\"n\":3}"));
  }
  {  // With a -wal beside it (a writer is open), a reader still sees the writer's pages.
    Store w(path);
    w.put_doctor_report(0, "{\"schema\":\"rtx.doctor.v1\",\"n\":8}");
    REQUIRE(std::filesystem::exists(path + "-wal"));
    Store r(path, ro);
    CHECK(r.latest_doctor_report() == std::string("{\"schema\":\"rtx.doctor.v1\",\"n\":8}"));
  }

  try {
    Store s(dir + "/missing/rtx.db", ro);
    FAIL("a missing store opened");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Environment);
    CHECK_THAT(std::string(e.what()), Catch::Contains("no store at " + dir + "/missing/rtx.db"));
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/missing"));

  // An older schema is not migrated by a read-only open.
  {
    Store s(path);
    s.exec("PRAGMA user_version = 1");
  }
  const std::string old = slurp(path);
  try {
    Store s(path, ro);
    FAIL("an older store opened read-only");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Environment);
    CHECK_THAT(std::string(e.what()), Catch::Contains("store schema version 1 is older than this rtx's"));
  }
  CHECK(slurp(path) == old);
}

TEST_CASE("store: a store from a newer rtx is refused and left unmodified", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/rtx.db";
  { 
    Store s(path);
    s.exec("PRAGMA user_version = 99");
  }
  REQUIRE(raw_int(path, "PRAGMA user_version") == 99);
  const std::string before = slurp(path);
  REQUIRE(!before.empty());
  const std::string expect = path + ": store schema version 99 is newer than this rtx supports (" +
                             std::to_string(Store::latest_schema_version()) + "); upgrade rtx or use another --db";
  try {
    Store s(path);
    FAIL("newer store opened");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Environment);
    CHECK(std::string(e.what()) == expect);
    CHECK(e.exit_code() == 3);
  }
  CHECK(slurp(path) == before);
}

TEST_CASE("store: random bytes are refused with Input naming the path", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  for (size_t size : {size_t(1), size_t(99), size_t(4096), size_t(12345)}) {
    const std::string path = dir + "/junk" + std::to_string(size) + ".db";
    std::mt19937 rng(static_cast<uint32_t>(size));
    std::string bytes(size, '\0');
    for (auto& b : bytes) b = static_cast<char>(rng());
    spit(path, bytes);
    INFO("size " << size);
    expect_error([&] { Store s(path); }, ErrorCategory::Input,
                 {path + " is not a valid rtx store (file is not a database): move it aside or pass --db"});
    CHECK(slurp(path) == bytes);
  }
}

TEST_CASE("store: a truncated real store is refused with Input", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string path = dir + "/rtx.db";
  {
    Store s(path);
    const int64_t run = s.begin_run("rtx-test", "[]", 1, "", "", "{}");
    const std::string big = "{\"pad\":\"" + std::string(3000, 'x') + "\"}";
    for (int i = 0; i < 50; ++i) s.put_artifact(run, "bench", "rtx.bench.v1", big);
  }
  const std::string full = slurp(path);
  REQUIRE(full.size() > 16 * 4096);
  for (size_t keep : {size_t(50), size_t(4096), size_t(5000), size_t(3 * 4096), full.size() - 4096}) {
    INFO("kept " << keep << " bytes");
    const std::string cut = dir + "/cut" + std::to_string(keep) + ".db";
    spit(cut, full.substr(0, keep));
    expect_error([&] { Store s(cut); }, ErrorCategory::Input, {cut + " is not a valid rtx store ("});
  }
}

TEST_CASE("store: integrity_check reports a damaged data page that open does not read", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string path = dir + "/rtx.db";
  {
    Store s(path);
    const int64_t run = s.begin_run("rtx-test", "[]", 1, "", "", "{}");
    for (int i = 0; i < 400; ++i)
      s.put_artifact(run, "bench", "rtx.bench.v1", "{\"i\":" + std::to_string(i) + ",\"pad\":\"" + std::string(200, 'x') + "\"}");
    CHECK(s.integrity_check() == std::vector<std::string>{"ok"});
  }
  std::string bytes = slurp(path);
  REQUIRE(bytes.size() % 4096 == 0);
  const size_t page = bytes.size() / 4096 - 1;  // the last page: artifact rows, not a root page
  for (size_t i = 0; i < 4096; ++i) bytes[page * 4096 + i] = static_cast<char>(0xA5 ^ i);
  spit(path, bytes);
  Store s(path);
  const auto problems = s.integrity_check();
  REQUIRE(!problems.empty());
  CHECK(problems != std::vector<std::string>{"ok"});
}

TEST_CASE("store: an SQLite file of another program is refused and untouched", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/other.db";
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  const std::string before = slurp(path);
  expect_error([&] { Store s(path); }, ErrorCategory::Input, {path + " is not a valid rtx store", "another program"});
  CHECK(slurp(path) == before);
}

TEST_CASE("store: a store whose user_version claims columns it lacks is refused and untouched", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string path = dir + "/v3-without-columns.db";
  {
    Store s(path);
    REQUIRE(s.schema_version() == Store::latest_schema_version());
  }
  // A hand-made or damaged store: version 3 claimed, schema 3's bench_results columns gone.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "ALTER TABLE bench_results DROP COLUMN contention_reason; "
                           "ALTER TABLE bench_results DROP COLUMN contended; PRAGMA wal_checkpoint(TRUNCATE);",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  const std::string before = slurp(path);
  const std::string want = path + " is not a valid rtx store (schema version " +
                           std::to_string(Store::latest_schema_version()) +
                           " but table 'bench_results' lacks columns 'contended', 'contention_reason'): move it aside "
                           "or pass --db";
  for (const bool read_only : {false, true}) {
    INFO("read_only " << read_only);
    StoreOptions o;
    o.read_only = read_only;
    try {
      Store s(path, o);
      FAIL("a store without its columns opened");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::Input);
      CHECK(e.exit_code() == 2);
      CHECK(std::string(e.what()) == want);
    }
  }
  CHECK(slurp(path) == before);
  // One column missing from another table: named alone.
  const std::string one = dir + "/one-column.db";
  { Store s(one); }
  REQUIRE(sqlite3_open(one.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "ALTER TABLE runs DROP COLUMN git_sha;", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  expect_error([&] { Store s(one); }, ErrorCategory::Input,
               {one + " is not a valid rtx store (", "table 'runs' lacks column 'git_sha')"});
}

TEST_CASE("store: a store whose tables do not match its user_version is refused with nothing migrated", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  struct Case {
    std::string name;
    int build_upto;  // migrations applied by hand
    int user_version;
    std::string why;
  };
  const std::vector<Case> cases = {
      // `why` follows "(schema version <user_version> but ": the version the file claims, not
      // the one a migration reached before the refusal.
      {"v1-no-tables", 0, 1, "migration 3 fails on its tables: no such table: bench_results"},
      {"v2-with-v1-tables", 1, 2, "table 'evolve_configs' is missing"},
      {"v2-with-v3-columns", 3, 2, "migration 3 fails on its tables: duplicate column name: contended"},
      {"v3-with-v2-tables", 2, 3, "table 'bench_results' lacks columns 'contended', 'contention_reason'"},
      {"v3-with-v4-columns", 4, 3, "migration 4 fails on its tables: duplicate column name: contended"},
      {"v4-with-v1-tables", 1, 4, "table 'bench_results' lacks columns 'contended', 'contention_reason'"},
  };
  REQUIRE(Store::latest_schema_version() == 4);  // the cases above name migrations 3 and 4
  for (const auto& k : cases) {
    INFO(k.name);
    const std::string path = dir + "/" + k.name + ".db";
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    for (const auto& m : rtx::store::detail::migrations())
      if (m.version <= k.build_upto) REQUIRE(sqlite3_exec(db, m.sql, nullptr, nullptr, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, ("PRAGMA user_version = " + std::to_string(k.user_version)).c_str(), nullptr, nullptr,
                         nullptr) == SQLITE_OK);
    sqlite3_close(db);
    const int64_t objects = raw_int(path, "SELECT count(*) FROM sqlite_master");
    REQUIRE(raw_text(path, "PRAGMA journal_mode") == "delete");
    const std::string before = slurp(path);
    const auto mtime = fs::last_write_time(path);
    try {
      Store s(path);
      FAIL("an inconsistent store opened");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.category() == ErrorCategory::Input);
      CHECK(e.exit_code() == 2);
      const std::string what = e.what();
      CHECK(what == path + " is not a valid rtx store (schema version " + std::to_string(k.user_version) + " but " +
                        k.why + "): move it aside or pass --db");
      CHECK(what.find("ALTER TABLE") == std::string::npos);  // no raw SQL
    }
    // Nothing committed: same version, same schema objects, the journal mode not switched to
    // WAL, and the file byte for byte as it was, no -wal or -journal left beside it.
    CHECK(raw_int(path, "PRAGMA user_version") == k.user_version);
    CHECK(raw_int(path, "SELECT count(*) FROM sqlite_master") == objects);
    CHECK(raw_text(path, "PRAGMA journal_mode") == "delete");
    const bool same_bytes = slurp(path) == before;
    CHECK(same_bytes);
    CHECK(fs::last_write_time(path) == mtime);
    CHECK_FALSE(fs::exists(path + "-wal"));
    CHECK_FALSE(fs::exists(path + "-journal"));
  }
}

TEST_CASE("store: a database with a negative user_version is refused and untouched", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/neg.db";
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "CREATE TABLE foo(x); PRAGMA user_version = -1;", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  const std::string before = slurp(path);
  expect_error([&] { Store s(path); }, ErrorCategory::Input, {path + " is not a valid rtx store", "user_version -1"});
  CHECK(slurp(path) == before);
}

TEST_CASE("store: unwritable location gives Environment naming the path", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  // A path under a regular file fails for every user, root included.
  spit(dir + "/file", "x");
  expect_error([&] { Store s(dir + "/file/rtx.db"); }, ErrorCategory::Environment, {dir + "/file"});
  expect_error([&] { Store s(dir + "/file/deeper/rtx.db"); }, ErrorCategory::Environment, {dir + "/file"});
  // A directory as the store path cannot be opened as a database.
  fs::create_directories(dir + "/adir");
  expect_error([&] { Store s(dir + "/adir"); }, ErrorCategory::Environment, {dir + "/adir"});
  if (geteuid() != 0) {  // chmod does not stop root
    fs::create_directories(dir + "/ro");
    REQUIRE(chmod((dir + "/ro").c_str(), 0500) == 0);
    expect_error([&] { Store s(dir + "/ro/sub/rtx.db"); }, ErrorCategory::Environment, {dir + "/ro/sub"});
    expect_error([&] { Store s(dir + "/ro/rtx.db"); }, ErrorCategory::Environment, {dir + "/ro/rtx.db"});
    chmod((dir + "/ro").c_str(), 0700);
  }
}

TEST_CASE("store: a transaction rolls back when an exception leaves its scope", "[cpu]") {
  Store s(rtx::test::temp_dir() + "/rtx.db");
  try {
    Transaction tx(s);
    s.prepare("INSERT INTO runs (tool) VALUES (?1)").bind(1, "a").run();
    s.prepare("INSERT INTO runs (tool) VALUES (?1)").bind(1, "b").run();
    CHECK(count_rows(s, "runs") == 2);  // visible inside the transaction
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  CHECK(count_rows(s, "runs") == 0);
  {  // a failing statement inside the transaction: nothing from it survives either
    CHECK_THROWS_AS(([&] {
                      Transaction tx(s);
                      s.prepare("INSERT INTO runs (tool) VALUES (?1)").bind(1, "c").run();
                      s.prepare("INSERT INTO runs (tool, args_json) VALUES ('d', 'not json')").run();
                      tx.commit();
                    }()),
                    Error);
  }
  CHECK(count_rows(s, "runs") == 0);
  {
    Transaction tx(s);
    s.prepare("INSERT INTO runs (tool) VALUES (?1)").bind(1, "kept").run();
    tx.commit();
  }
  CHECK(count_rows(s, "runs") == 1);
  {  // nesting is refused
    Transaction tx(s);
    expect_error([&] { Transaction inner(s); }, ErrorCategory::Internal, {"nested"});
  }
}

TEST_CASE("store: a second connection holding the write lock makes writes fail after the timeout", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/rtx.db";
  Store a(path, StoreOptions{150});
  Store b(path);
  const int64_t before = count_rows(a, "runs");
  {
    Transaction hold(b);
    b.prepare("INSERT INTO runs (tool) VALUES ('b')").run();
    const auto t0 = std::chrono::steady_clock::now();
    expect_error([&] { a.begin_run("rtx-a", "[]", 0, "", "", "{}"); }, ErrorCategory::Environment,
                 {path, "store is locked by another process (busy for 150 ms)"});
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(waited >= 0.12);
    CHECK(waited < 5.0);
    // Readers are not blocked in WAL mode, and they do not see b's uncommitted row.
    CHECK(count_rows(a, "runs") == before);
  }  // b rolls back, lock released
  const int64_t id = a.begin_run("rtx-a", "[]", 0, "", "", "{}");
  CHECK(id > 0);
  CHECK(count_rows(a, "runs") == before + 1);
}

TEST_CASE("store: runs, artifacts and doctor reports round-trip", "[cpu]") {
  Store s(rtx::test::temp_dir() + "/rtx.db");
  const uint64_t seed = 0xFFFFFFFFFFFFFFF1ull;  // above INT64_MAX: bit-cast round trip
  const int64_t run = s.begin_run("rtx-bench", "[\"--seed\",\"1\"]", seed, "deadbeef", "Xeon", "{\"cores\":2}");
  auto r = s.get_run(run);
  REQUIRE(r);
  CHECK(r->id == run);
  CHECK(r->tool == "rtx-bench");
  CHECK(r->args_json == "[\"--seed\",\"1\"]");
  CHECK(r->seed == seed);
  CHECK(r->status == "running");
  CHECK(!r->finished_at);
  CHECK(r->git_sha == "deadbeef");
  CHECK(r->hw_sku == "Xeon");
  CHECK(r->hw_json == "{\"cores\":2}");
  CHECK(r->started_at.size() == 24);  // 2025-01-31T12:00:00.123Z
  CHECK(r->started_at.back() == 'Z');
  s.finish_run(run, "ok");
  r = s.get_run(run);
  CHECK(r->status == "ok");
  REQUIRE(r->finished_at);
  CHECK(*r->finished_at >= r->started_at);
  CHECK(!s.get_run(run + 100));
  expect_error([&] { s.finish_run(run + 100, "ok"); }, ErrorCategory::Input, {"no run with id"});
  expect_error([&] { s.begin_run("t", "not json", 0, "", "", "{}"); }, ErrorCategory::Input, {"args_json"});

  CHECK(!s.latest_artifact("bench"));
  const int64_t a1 = s.put_artifact(run, "bench", "rtx.bench.v1", "{\"n\":1}");
  const int64_t a2 = s.put_artifact(0, "bench", "rtx.bench.v1", "{\"n\":2}");
  s.put_artifact(run, "profile", "rtx.profile.v1", "{\"p\":1}");
  CHECK(a2 > a1);
  CHECK(s.latest_artifact("bench") == std::optional<std::string>("{\"n\":2}"));
  CHECK(s.latest_artifact("profile") == std::optional<std::string>("{\"p\":1}"));
  CHECK(!s.latest_artifact("trace"));
  expect_error([&] { s.put_artifact(run + 100, "bench", "rtx.bench.v1", "{}"); }, ErrorCategory::Input,
               {"FOREIGN KEY"});
  expect_error([&] { s.put_artifact(run, "bench", "rtx.bench.v1", "{"); }, ErrorCategory::Input, {"json_valid"});
  CHECK(count_rows(s, "artifacts") == 3);
  Statement& nul = s.prepare("SELECT run_id FROM artifacts WHERE id = ?1");
  nul.bind(1, a2);
  REQUIRE(nul.step());
  CHECK(nul.is_null(0));
  nul.reset();

  CHECK(!s.latest_doctor_report());
  s.put_doctor_report(run, "{\"schema\":\"rtx.doctor.v1\",\"n\":1}");
  s.put_doctor_report(0, "{\"schema\":\"rtx.doctor.v1\",\"n\":2}");
  CHECK(s.latest_doctor_report() == std::optional<std::string>("{\"schema\":\"rtx.doctor.v1\",\"n\":2}"));
}

TEST_CASE("store: statements bind by index and name, cache by SQL, read every type", "[cpu]") {
  Store s(":memory:");
  s.exec("CREATE TABLE t (i INTEGER, d REAL, s TEXT, b BLOB, n INTEGER)");
  const std::string ins = "INSERT INTO t VALUES (:i, :d, :s, :b, :n)";
  Statement& st = s.prepare(ins);
  CHECK(&s.prepare(ins) == &st);  // cached by text
  const std::vector<uint8_t> blob = {0, 1, 2, 255, 0};
  st.bind(":i", int64_t(-5)).bind(":d", 2.5).bind(":s", std::string("he\0llo", 6)).bind(":n", nullptr);
  st.bind_blob(":b", blob.data(), blob.size());
  st.run();
  st.bind(1, 7).bind(2, -0.125).bind(3, "x").bind_blob(4, nullptr, 0).bind(5, static_cast<const char*>(nullptr));
  st.run();
  expect_error([&] { st.bind(":nope", 1); }, ErrorCategory::Internal, {":nope"});
  // Every integer type binds; unsigned 64-bit values round-trip bit-cast.
  const size_t sz = 127;
  const uint64_t big = 0xFFFFFFFFFFFFFFFFull;
  const uint32_t u32 = 4000000000u;
  Statement& ints = s.prepare("SELECT ?1, ?2, ?3, ?4, ?5");
  ints.bind(1, sz).bind(2, big).bind(3, true).bind(4, u32).bind(5, static_cast<int16_t>(-7));
  REQUIRE(ints.step());
  CHECK(ints.column_int64(0) == 127);
  CHECK(ints.column_int64(1) == -1);
  CHECK(static_cast<uint64_t>(ints.column_int64(1)) == big);
  CHECK(ints.column_int64(2) == 1);
  CHECK(ints.column_int64(3) == 4000000000LL);
  CHECK(ints.column_int64(4) == -7);
  ints.reset();

  Statement& q = s.prepare("SELECT i, d, s, b, n FROM t ORDER BY rowid");
  CHECK(q.column_count() == 5);
  REQUIRE(q.step());
  CHECK(q.column_int64(0) == -5);
  CHECK(q.column_double(1) == 2.5);
  CHECK(q.column_text(2) == std::string("he\0llo", 6));
  CHECK(q.column_blob(3) == blob);
  CHECK(q.is_null(4));
  CHECK(!q.column_opt_int64(4));
  CHECK(q.column_opt_double(1) == std::optional<double>(2.5));
  REQUIRE(q.step());
  CHECK(q.column_int64(0) == 7);
  CHECK(q.column_double(1) == -0.125);
  CHECK(q.column_opt_text(2) == std::optional<std::string>("x"));
  CHECK(!q.is_null(3));  // empty blob is a blob, not NULL
  CHECK(q.column_blob(3).empty());
  CHECK(!q.column_opt_text(4));
  CHECK(!q.step());
  expect_error([&] { s.prepare("SELEC nonsense"); }, ErrorCategory::Internal, {"SELEC nonsense", "statement.cpp:"});
}

TEST_CASE("store: schema constraints of the tool tables hold", "[cpu]") {
  Store s(":memory:");
  const std::string trial =
      "INSERT INTO tuning_trials (op, variant, shape, dtype, backend, sku, config_json, status) "
      "VALUES ('matmul', 'v1', '{\"M\":7}', 'f32', 'cpu', 'xeon', ?1, ?2)";
  s.prepare(trial).bind(1, "{\"tile\":32}").bind(2, "ok").run();
  s.prepare(trial).bind(1, "{\"tile\":64}").bind(2, "skip").run();
  expect_error([&] { s.prepare(trial).bind(1, "{\"tile\":32}").bind(2, "fail").run(); }, ErrorCategory::Input,
               {"UNIQUE"});
  expect_error([&] { s.prepare(trial).bind(1, "{\"tile\":128}").bind(2, "maybe").run(); }, ErrorCategory::Input,
               {"CHECK"});
  CHECK(count_rows(s, "tuning_trials") == 2);

  const std::string prof = "INSERT INTO profiles (key, version, params_json) VALUES (?1, ?2, '{}')";
  s.prepare(prof).bind(1, "matmul/cpu").bind(2, 1).run();
  expect_error([&] { s.prepare(prof).bind(1, "matmul/cpu").bind(2, 1).run(); }, ErrorCategory::Input, {"UNIQUE"});
  s.prepare("INSERT INTO profile_current (key, version) VALUES ('matmul/cpu', 1)").run();
  expect_error([&] { s.prepare("INSERT INTO profile_current (key, version) VALUES ('other', 3)").run(); },
               ErrorCategory::Input, {"FOREIGN KEY"});
  // kg edges cascade with their nodes.
  s.exec("INSERT INTO kg_nodes (kind, ref) VALUES ('proposal', '1'), ('profile', 'matmul/cpu@1');"
         "INSERT INTO kg_edges (src, dst, kind) VALUES (1, 2, 'produced');");
  s.exec("DELETE FROM kg_nodes WHERE id = 1");
  CHECK(count_rows(s, "kg_edges") == 0);
}

TEST_CASE("store: a Store moves", "[cpu]") {
  Store a(":memory:");
  const int64_t id = a.begin_run("t", "[]", 3, "", "", "{}");
  Store b(std::move(a));
  CHECK(b.get_run(id)->seed == 3);
  Store c(":memory:");
  c = std::move(b);
  CHECK(c.get_run(id)->seed == 3);
  CHECK_THROWS_AS(a.path(), Error);
}
