// SIGINT and SIGTERM to a launcher: recorded, for the supervisor, the hostfile runner and the
// restart loop to act on at their next look (a handler may do nothing more).
#pragma once

#include <string>

namespace dpl::supervision {

// SIGINT and SIGTERM from now on only record the signal.
void InstallStopHandlers();
// The stop signal received, or 0.
int StopSignal();
// "15 (SIGTERM)".
std::string SignalName(int signal_number);

}  // namespace dpl::supervision
