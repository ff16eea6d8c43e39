-- When the trace ran (ns, on the clock of every activity record): nothing measured lies outside it.
-- requires: ANALYSIS_DETAILS
SELECT min(startTime) AS start_ns, max(stopTime) AS stop_ns FROM ANALYSIS_DETAILS
