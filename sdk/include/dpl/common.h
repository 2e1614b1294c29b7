/*
 * dpl SDK: what every plugin kind shares.
 *
 * Compatibility rules (the same for every header of the SDK):
 *  - This is a C ABI. Headers compile as C99 and as C++; nothing here is a C++ type.
 *  - Every struct that crosses the library edge begins with `struct_size` (the sizeof the
 *    writer compiled against) and grows only at its end. A reader must not touch fields past
 *    the `struct_size` it was given.
 *  - A released ABI version (`*_v1.h`) is frozen. A change is a new version in a new header;
 *    the host adapts older versions it still supports.
 *  - Strings are NUL-terminated UTF-8 and are borrowed unless a comment says otherwise.
 *  - No exception ever crosses the edge: every plugin function returns a dpl_status, and the
 *    message of the last failure on the calling thread is available from `last_error`.
 *  - Loading a plugin library starts no thread (start them in `create`): the launcher forks a
 *    machine's workers from the process that loaded the plugins. A plugin that does start one
 *    still works, more slowly: the launcher then lets every worker load on its own.
 *  - The host ignores SIGPIPE in the processes that run plugins: a write to a socket whose peer
 *    is gone fails with EPIPE instead of killing the process.
 */
#ifndef DPL_COMMON_H
#define DPL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "DPLP" little-endian: first field check that a symbol really is a dpl plugin table. */
#define DPL_PLUGIN_MAGIC 0x504C5044u

/* Result of every plugin call. Values are fixed: never renumber, only append. */
typedef enum dpl_status {
  DPL_OK = 0,
  DPL_ERR_INVALID_ARGUMENT = 1, /* the caller passed something the plugin cannot accept */
  DPL_ERR_UNSUPPORTED = 2,      /* dtype, op or device this plugin does not implement */
  DPL_ERR_TIMEOUT = 3,          /* a blocking call ran past its timeout */
  DPL_ERR_COMMUNICATION = 4,    /* a peer went away or a network operation failed */
  DPL_ERR_NO_DEVICE = 5,        /* the requested device does not exist on this machine */
  DPL_ERR_IO = 6,               /* a file could not be read or written */
  DPL_ERR_BUFFER_TOO_SMALL = 7, /* the output buffer was too small; the needed size is reported */
  DPL_ERR_NOT_FOUND = 8,        /* a key or file that was asked for does not exist */
  DPL_ERR_INTERNAL = 9          /* anything else; the message says what */
} dpl_status;

/* Plugin kinds. Values are fixed. */
typedef enum dpl_plugin_kind {
  DPL_PLUGIN_KIND_BACKEND = 1, /* a communication backend (dpl/backend.h) */
  DPL_PLUGIN_KIND_MODEL = 2,   /* a model (dpl/model.h) */
  DPL_PLUGIN_KIND_DATASET = 3  /* a data set format (dpl/dataset.h) */
} dpl_plugin_kind;

typedef enum dpl_log_level {
  DPL_LOG_DEBUG = 0,
  DPL_LOG_INFO = 1,
  DPL_LOG_WARNING = 2,
  DPL_LOG_ERROR = 3
} dpl_log_level;

/*
 * Host logging callback. The host prefixes the rank and writes the line to its log.
 * `message` is borrowed for the duration of the call and carries no trailing newline.
 * Thread-safe: a plugin may call it from any thread. Never blocks on the network.
 */
typedef void (*dpl_log_fn)(void* log_context, dpl_log_level level, const char* message);

/*
 * The common head of every plugin table. The host reads it first, before it knows the kind's
 * full struct, to say exactly why it refuses a plugin.
 */
typedef struct dpl_plugin_header {
  uint32_t struct_size;    /* sizeof the whole plugin table, not just this header */
  uint32_t magic;          /* DPL_PLUGIN_MAGIC */
  uint32_t kind;           /* a dpl_plugin_kind */
  uint32_t abi_version;    /* the version in the entry symbol's name, e.g. 1 for *_v1 */
  const char* name;        /* short unique name used on the command line, e.g. "gloo"; static */
  const char* version;     /* the plugin's own version, e.g. "1.0.0"; static */
  const char* description; /* one line for `launcher plugins`; static; may be NULL */
} dpl_plugin_header;

/* Visibility for the one exported entry symbol of a plugin; everything else stays hidden. */
#if defined(_WIN32)
#define DPL_PLUGIN_EXPORT __declspec(dllexport)
#else
#define DPL_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/*
 * Gives a plugin's entry table its entry symbol name. The symbol (e.g. dpl_backend_plugin_v1) is
 * also the name of the table's type, and neither C nor C++ lets one identifier name both, so the
 * table variable takes any other name and this attaches the symbol name (an asm label; GCC and
 * Clang, ELF targets). Declare, then define:
 *     DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v1 my_backend_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v1);
 *     const dpl_backend_plugin_v1 my_backend_table = {...};
 * The argument is macro-expanded first, so a macro that names the symbol names it here too.
 */
#define DPL_PLUGIN_ENTRY_SYMBOL(symbol) DPL_PLUGIN_ENTRY_SYMBOL_NAMED_(symbol)
#define DPL_PLUGIN_ENTRY_SYMBOL_NAMED_(symbol) __asm__(#symbol)

#ifdef __cplusplus
}
#endif

#endif /* DPL_COMMON_H */
