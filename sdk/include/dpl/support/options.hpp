// dpl SDK, C++ plugin support: a plugin's "key=value,key=value" options (--backend-options,
// --model-options), read by name. Each Get* marks its key as known; after reading all it knows,
// the plugin calls CheckAllKnown, which refuses any other key naming the known ones. Errors are
// PluginError(DPL_ERR_INVALID_ARGUMENT) for Guarded (dpl/support/error.hpp) to report.
#ifndef DPL_SUPPORT_OPTIONS_HPP
#define DPL_SUPPORT_OPTIONS_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dpl/support/error.hpp"

namespace dpl::support {

class KeyValueOptions {
 public:
  // Splits `text` ("" = no options; spaces around entries ignored). `flag` names where the text
  // came from in messages, e.g. "--model-options". Throws on "a", "=1", "a=" and a key given
  // twice.
  KeyValueOptions(const char* text, std::string flag) : flag_(std::move(flag)) {
    std::stringstream stream(text == nullptr ? "" : text);
    std::string entry;
    while (std::getline(stream, entry, ',')) {
      const auto first = entry.find_first_not_of(' ');
      if (first == std::string::npos) continue;
      entry = entry.substr(first, entry.find_last_not_of(' ') - first + 1);
      const auto equals = entry.find('=');
      if (equals == std::string::npos || equals == 0) {
        throw Invalid(flag_ + " entry \"" + entry + "\" is not key=value");
      }
      const std::string key = entry.substr(0, equals);
      if (equals + 1 == entry.size()) {
        // An empty value would read as "not given" for some keys and as an error for others.
        throw Invalid("option \"" + key + "\" in " + flag_ +
                      " has no value: give key=value, or leave the key out for its default");
      }
      if (!values_.emplace(key, entry.substr(equals + 1)).second) {
        throw Invalid("option \"" + key + "\" is given twice in " + flag_);
      }
    }
  }

  bool Has(const std::string& key) const {
    Know(key);
    return values_.count(key) != 0;
  }

  std::string GetString(const std::string& key, const std::string& default_value) const {
    Know(key);
    auto found = values_.find(key);
    return found == values_.end() ? default_value : found->second;
  }

  // Accepts 0/1/true/false.
  bool GetBool(const std::string& key, bool default_value) const {
    const std::string text = GetString(key, default_value ? "1" : "0");
    if (text == "1" || text == "true") return true;
    if (text == "0" || text == "false") return false;
    throw Invalid("option \"" + key + "\" expects 0, 1, true or false, got \"" + text + "\"");
  }

  int64_t GetInt(const std::string& key, int64_t default_value) const {
    const std::string text = GetString(key, std::to_string(default_value));
    try {
      std::size_t used = 0;
      const long long value = std::stoll(text, &used);
      if (used == text.size()) return static_cast<int64_t>(value);
    } catch (const std::exception&) {
    }
    throw Invalid("option \"" + key + "\" expects an integer, got \"" + text + "\"");
  }

  double GetDouble(const std::string& key, double default_value) const {
    std::ostringstream default_text;
    default_text << default_value;
    const std::string text = GetString(key, default_text.str());
    try {
      std::size_t used = 0;
      const double value = std::stod(text, &used);
      if (used == text.size()) return value;
    } catch (const std::exception&) {
    }
    throw Invalid("option \"" + key + "\" expects a number, got \"" + text + "\"");
  }

  // One of `choices`; the error lists them.
  std::string GetChoice(const std::string& key, const std::string& default_value,
                        const std::vector<std::string>& choices) const {
    const std::string text = GetString(key, default_value);
    if (std::find(choices.begin(), choices.end(), text) != choices.end()) return text;
    throw Invalid("option \"" + key + "\" must be one of " + Joined(choices, "|") + ", got \"" +
                  text + "\"");
  }

  // Throws for the first given key no Get* or Has asked for, naming the known ones.
  void CheckAllKnown() const {
    for (const auto& entry : values_) {
      if (std::find(known_.begin(), known_.end(), entry.first) != known_.end()) continue;
      throw Invalid("unknown option \"" + entry.first + "\" in " + flag_ +
                    "; known options: " + (known_.empty() ? "(none)" : Joined(known_, ", ")));
    }
  }

 private:
  static PluginError Invalid(const std::string& message) {
    return PluginError(DPL_ERR_INVALID_ARGUMENT, message);
  }
  static std::string Joined(const std::vector<std::string>& items, const char* separator) {
    std::string text;
    for (const auto& item : items) text += (text.empty() ? "" : separator) + item;
    return text;
  }
  void Know(const std::string& key) const {
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  }

  std::string flag_;
  std::map<std::string, std::string> values_;
  mutable std::vector<std::string> known_;  // in the order first asked for
};

}  // namespace dpl::support

#endif  // DPL_SUPPORT_OPTIONS_HPP
