/*
 * log.h - the operator's logger: one JSON object per line (STYLE.md section 10).
 *
 *   log_info("Created Pod", "{s:s, s:i}", "trainjob", "ml/spam", "replica", 3);
 *   -> {"ts":"2026-11-30T07:12:01.123Z","level":"info","msg":"Created
 * Pod","trainjob":"ml/spam","replica":3}
 *
 * Fields use Jansson's json_pack() format (an object format, or none at all). The level is
 * checked in the macro before any argument is formatted, so a disabled debug line costs one
 * comparison. Warnings and errors that repeat (same message and fields) are rate-limited: at most
 * LOG_BURST lines per key every LOG_WINDOW_S seconds; the next line that gets through carries
 * "suppressed":N. A line is written with one write(2), so lines from threads never interleave.
 * The logger is the only global state in the operator (STYLE.md section 4); it is thread-safe.
 */
#ifndef GANTRY_LOG_H
#define GANTRY_LOG_H

enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

#define LOG_BURST    5
#define LOG_WINDOW_S 10
#define LOG_MAX_LINE 8192 /* longer lines are cut and marked "truncated":true */

/* Lines below this level are dropped before formatting. Set it with log_set_level(). */
extern volatile int log_min_level;

void log_set_level(enum log_level level);
/* "debug", "info", "warn"/"warning", "error" -> 0 and *level set; -1 for anything else. */
int log_parse_level(const char *name, enum log_level *level);
/* Where lines go (default 2, stderr). Tests point it at a pipe or file. */
void log_set_fd(int fd);

/* Formats and writes one line; use the macros, which check the level first. fields may be NULL. */
void log_emit(enum log_level level, const char *msg, const char *fields, ...);

#define LOG_AT_(lvl, ...)                                                                          \
    do {                                                                                           \
        if ((int)(lvl) >= log_min_level)                                                           \
            log_emit((lvl), __VA_ARGS__, NULL);                                                    \
    } while (0)
#define log_debug(...) LOG_AT_(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...)  LOG_AT_(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...)  LOG_AT_(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) LOG_AT_(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif /* GANTRY_LOG_H */
