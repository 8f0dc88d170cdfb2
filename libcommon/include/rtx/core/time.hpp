// UTC time stamps in ISO 8601 / RFC 3339 form ("2026-12-07T20:41:02Z"), one home for every
// artifact, store row, log line and report that writes one.
#pragma once
#include <chrono>
#include <string>

namespace rtx {

/// How many fractional digits a time stamp carries.
enum class TimeStampPrecision {
  Seconds,  ///< "YYYY-MM-DDTHH:MM:SSZ"
  Millis,   ///< "YYYY-MM-DDTHH:MM:SS.mmmZ" (the store's format, as SQLite's strftime('%Y-%m-%dT%H:%M:%fZ'))
};

/// `t` as an RFC 3339 UTC time stamp (proleptic Gregorian calendar, as gmtime_r), the
/// fraction truncated to the precision (times before 1970 included: -0.5 s is
/// 1969-12-31T23:59:59.500Z). Throws rtx::Error(Input) for a time gmtime_r cannot represent.
std::string utc_timestamp(std::chrono::system_clock::time_point t, TimeStampPrecision p = TimeStampPrecision::Millis);
/// `epoch_s` (seconds since 1970-01-01T00:00:00Z) rounded to the nearest millisecond, as
/// utc_timestamp. Throws rtx::Error(Input) for a non-finite value or one out of range.
std::string utc_timestamp(double epoch_s, TimeStampPrecision p = TimeStampPrecision::Millis);
/// The current time as utc_timestamp.
std::string utc_now(TimeStampPrecision p = TimeStampPrecision::Millis);

}  // namespace rtx
