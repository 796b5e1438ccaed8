"""Planner and executors: routing, validated plans, executor child runs, synthesis (issue 9).

How a planning run waits: after it plans (or dispatches the next ready steps) the parent run
stays ``executing`` with its lease released, so it holds its session's lane while no worker
holds it. Executor child runs skip the lane. When a child ends, ``parent_resume_when_children_done``
(called by the child's task, and by the sweeper as the durable fallback) queues the parent again
once none of its children is open; the parent's next execution reads the plan and the children's
rows and continues: next ready steps, a replan after a failure, or the synthesis.
"""
