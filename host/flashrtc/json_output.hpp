#pragma once
// `--json` output of the `flashrtc` command: a command that prints data prints one JSON document, a command
// that streams rows (bench, compile --all) one JSON value per line; each command's --help says which. The
// fields come from one serializer per data type (flashrtc_tools/json_fields.hpp). All of it is printed here,
// through json_text (valid UTF-8 whatever the strings held).
#include <nlohmann/json.hpp>

#include "flashrtc_tools/json_fields.hpp"

namespace flashrtc::cli {

/// Fields in the order they are set, so documents read as the text output does.
using Json = nlohmann::ordered_json;

/// The whole output of a command, indented, on stdout.
void print_json_document(const Json& document);
/// One row of a stream, on one line of stdout, flushed.
void print_json_line(const Json& row);

/// What a failing command prints on stdout in --json mode, beside its one stderr line:
/// {"error": {"kind": ..., "message": ..., "exit_code": ...}}; kind is the flashrtc::Error code's name
/// ("NoDevice", ...), "usage" or "missing tool".
Json error_json(const std::string& kind, const std::string& message, int exit_code);

}  // namespace flashrtc::cli
