"""The book layer: executing chapters (``runner``, and ``python -m resid.book``), their parameters
(``parameters``), what a reader sees and what changes without executing (``presentation``),
fingerprints, status and registration (``freshness``), handouts and the wheel (``handouts``), the
HTML and the results page (``pages``), the course page (``course``), the exercises' checks
(``exercises``) and the chapter sources (``sources``). A chapter reads its public names here:
``from resid import book; book.save_results(...)``.
"""

from resid.runtime.paths import CHAPTERS_OUT, HANDOUTS_OUT, ROOT

from .freshness import (
    ChapterStatus,
    chapter_status,
    fingerprint,
    package_commit,
    registration,
    training_needed,
)
from .handouts import (
    build_wheel,
    handout,
    handout_package,
    write_handouts,
)
from .pages import (
    build_html,
    results_page,
    site_notebooks,
)
from .parameters import (
    Parameter,
    declared_parameters,
    parse_parameters,
    precision_note,
    validate_parameters,
)
from .presentation import (
    narrative_edited,
    present,
    refresh_narrative,
)
from .runner import (
    EXECUTION_ENV,
    RESULT_GLUE,
    RESULT_MIME,
    main,
    print_status,
    refresh_result,
    rerun_command,
    run_chapter,
    run_chapters,
    save_results,
    start_chapter,
    verdict_summary,
)
from .sources import (
    NOTEBOOKS,
    ChapterError,
    chapters,
    source,
    source_notebook,
)
