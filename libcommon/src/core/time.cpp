// UTC time stamps (time.hpp).
#include "rtx/core/time.hpp"

#include <cmath>
#include <cstdio>
#include <ctime>

#include "rtx/core/error.hpp"

namespace rtx {

std::string utc_timestamp(std::chrono::system_clock::time_point t, TimeStampPrecision p) {
  using namespace std::chrono;
  const auto ms_total = floor<milliseconds>(t.time_since_epoch()).count();
  // Floor division, so that times before the epoch get a fraction in [0, 1000).
  int64_t secs = ms_total / 1000, ms = ms_total % 1000;
  if (ms < 0) {
    ms += 1000;
    secs -= 1;
  }
  const std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  if (gmtime_r(&tt, &tm) == nullptr)
    throw Error(ErrorCategory::Input, "time " + std::to_string(secs) + " s since 1970 has no UTC calendar date",
                "rtx::utc_timestamp");
  char buf[96];
  if (p == TimeStampPrecision::Seconds)
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec);
  else
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

std::string utc_timestamp(double epoch_s, TimeStampPrecision p) {
  // system_clock counts nanoseconds in int64: +-9.2e9 s (about 292 years) around 1970.
  if (!std::isfinite(epoch_s) || std::fabs(epoch_s) > 9.2e9)
    throw Error(ErrorCategory::Input, "time " + std::to_string(epoch_s) + " s since 1970 is not a representable time",
                "rtx::utc_timestamp");
  const auto ms = std::chrono::milliseconds(std::llround(epoch_s * 1000));
  return utc_timestamp(
      std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(ms)), p);
}

std::string utc_now(TimeStampPrecision p) { return utc_timestamp(std::chrono::system_clock::now(), p); }

}  // namespace rtx
